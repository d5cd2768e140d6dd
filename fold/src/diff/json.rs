//! The `flamerec-diff/1` JSON object of a [`Diff`]: every function and
//! every grown call path, whatever the Markdown folds. It only formats
//! what the diff holds and returns plain `io::Result`, so a caller can tell
//! a closed pipe from a real failure.

use std::io::{self, BufWriter, Write};

use serde::Serialize;

use super::stats::{DispersionBasis, CONFIDENCE_PCT};
use super::{Diff, Interval, Trip};

/// Schema name of the diff JSON. Fields added since its first version
/// (runs, times, intervals, verdicts, the gate, noise, notes, the weight's
/// unit, call paths) are additive: a reader of the first version reads
/// this one.
pub const DIFF_SCHEMA: &str = "flamerec-diff/1";

/// Writes the diff as one JSON object (schema `flamerec-diff/1`), functions
/// in the diff's order (largest total change first).
pub fn write_diff_json<W: Write>(diff: &Diff, out: W) -> io::Result<()> {
    let doc = Json {
        schema: DIFF_SCHEMA,
        base_samples: diff.base_weight,
        new_samples: diff.new_weight,
        weight_unit: &diff.weight_unit,
        base_runs: diff.base_runs,
        new_runs: diff.new_runs,
        confidence_pct: CONFIDENCE_PCT,
        time: diff.time.map(|t| JsonTime {
            base_ns: t.base_ns,
            new_ns: t.new_ns,
            change_pct: t.change.into(),
        }),
        interrupts: JsonInterrupts {
            base_pct: diff.base_interrupt_pct,
            new_pct: diff.new_interrupt_pct,
        },
        noise: JsonNoise {
            dispersion: diff.noise.dispersion,
            dispersion_measured: diff.noise.dispersion_df.is_some(),
            dispersion_over: match diff.noise.basis {
                DispersionBasis::Leaves => Some("leaves"),
                DispersionBasis::CallPaths(_) => Some("call_paths"),
                DispersionBasis::OneRun | DispersionBasis::OneCategory => None,
            },
            dispersion_frames: match diff.noise.basis {
                DispersionBasis::Leaves => Some(1),
                DispersionBasis::CallPaths(n) => Some(n),
                DispersionBasis::OneRun | DispersionBasis::OneCategory => None,
            },
            run_spread_pct: diff.noise.run_spread * 100.0,
            run_spread_measured: diff.noise.run_spread_df.is_some(),
        },
        gate: JsonGate {
            fail_above: diff.gate.share_pts,
            fail_time_above: diff.gate.time_pct,
            tripped: diff.tripped().iter().map(|f| f.name.as_str()).collect(),
        },
        notes: &diff.notes,
        functions: diff
            .functions
            .iter()
            .map(|f| JsonFunction {
                name: &f.name,
                module: &f.module,
                base: JsonShares {
                    self_pct: f.base.self_pct,
                    total_pct: f.base.total_pct,
                    self_ns: f.base_time.map(|t| t.self_ns),
                    total_ns: f.base_time.map(|t| t.total_ns),
                },
                new: JsonShares {
                    self_pct: f.new.self_pct,
                    total_pct: f.new.total_pct,
                    self_ns: f.new_time.map(|t| t.self_ns),
                    total_ns: f.new_time.map(|t| t.total_ns),
                },
                self_delta_pct: f.self_delta_pct,
                total_delta_pct: f.total_delta_pct,
                time_change_pct: f.time_change.map(Into::into),
                share_change_pts: f.share_change.into(),
                verdict: f.verdict.as_str(),
                trips: f.trips.map(|t| match t {
                    Trip::Time => "time",
                    Trip::Share => "share",
                }),
                detectable_time_pct: f.detectable_time_pct,
                detectable_share_pts: f.detectable_share_pts,
            })
            .collect(),
        paths: diff
            .paths
            .iter()
            .map(|p| JsonPath {
                frames: &p.frames,
                base: JsonPathSide {
                    total_pct: p.base_pct,
                    total_ns: p.base_ns,
                },
                new: JsonPathSide {
                    total_pct: p.new_pct,
                    total_ns: p.new_ns,
                },
                time_change_pct: p.time_change.map(Into::into),
                share_change_pts: p.share_change.into(),
            })
            .collect(),
    };
    let mut out = BufWriter::new(out);
    serde_json::to_writer(&mut out, &doc)?;
    out.write_all(b"\n")?;
    out.flush()
}

#[derive(Serialize)]
struct Json<'a> {
    schema: &'static str,
    /// The total weight, in `weight_unit` (named in the first version).
    base_samples: u64,
    new_samples: u64,
    weight_unit: &'a str,
    base_runs: usize,
    new_runs: usize,
    confidence_pct: f64,
    time: Option<JsonTime>,
    interrupts: JsonInterrupts,
    noise: JsonNoise,
    gate: JsonGate<'a>,
    notes: &'a [String],
    functions: Vec<JsonFunction<'a>>,
    paths: Vec<JsonPath<'a>>,
}

#[derive(Serialize)]
struct JsonPath<'a> {
    frames: &'a [String],
    base: JsonPathSide,
    new: JsonPathSide,
    time_change_pct: Option<JsonInterval>,
    share_change_pts: JsonInterval,
}

#[derive(Serialize)]
struct JsonPathSide {
    total_pct: f64,
    total_ns: Option<f64>,
}

#[derive(Serialize)]
struct JsonTime {
    base_ns: f64,
    new_ns: f64,
    change_pct: JsonInterval,
}

#[derive(Serialize)]
struct JsonInterrupts {
    base_pct: f64,
    new_pct: f64,
}

#[derive(Serialize)]
struct JsonNoise {
    dispersion: f64,
    dispersion_measured: bool,
    dispersion_over: Option<&'static str>,
    dispersion_frames: Option<usize>,
    run_spread_pct: f64,
    run_spread_measured: bool,
}

#[derive(Serialize)]
struct JsonGate<'a> {
    fail_above: Option<f64>,
    fail_time_above: Option<f64>,
    tripped: Vec<&'a str>,
}

#[derive(Serialize)]
struct JsonInterval {
    estimate: f64,
    low: f64,
    high: f64,
}

impl From<Interval> for JsonInterval {
    fn from(i: Interval) -> Self {
        JsonInterval {
            estimate: i.estimate,
            low: i.low,
            high: i.high,
        }
    }
}

#[derive(Serialize)]
struct JsonFunction<'a> {
    name: &'a str,
    module: &'a str,
    base: JsonShares,
    new: JsonShares,
    self_delta_pct: f64,
    total_delta_pct: f64,
    time_change_pct: Option<JsonInterval>,
    share_change_pts: JsonInterval,
    verdict: &'static str,
    trips: Option<&'static str>,
    detectable_time_pct: Option<f64>,
    detectable_share_pts: f64,
}

#[derive(Serialize)]
struct JsonShares {
    self_pct: f64,
    total_pct: f64,
    self_ns: Option<f64>,
    total_ns: Option<f64>,
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::Side;
    use super::*;

    fn diff(base: &str, new: &str) -> Diff {
        let side = |t: &str| Side::from_folded(t.as_bytes(), Path::new("t")).unwrap();
        Diff::new(&side(base), &side(new))
    }

    #[test]
    fn json_keeps_the_first_versions_fields_and_adds_the_gates() {
        let d = diff("p;main;a 3\np;main;b 1\n", "p;main;a 1\np;main;c 1\n");
        let mut out = Vec::new();
        write_diff_json(&d, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["schema"], "flamerec-diff/1");
        assert_eq!(v["base_samples"], 4);
        assert_eq!(v["new_samples"], 2);
        let fs = v["functions"].as_array().unwrap();
        assert_eq!(fs.len(), 4);
        // Largest total change first: c (+50), then a (-25) and b (-25) by self change and name.
        let c = &fs[0];
        assert_eq!(c["name"], "c");
        assert_eq!(c["module"], "");
        assert_eq!(c["base"]["total_pct"], 0.0);
        assert_eq!(c["new"]["self_pct"], 50.0);
        assert_eq!(c["self_delta_pct"], 50.0);
        assert_eq!(c["total_delta_pct"], 50.0);
        // Folded text: no time.
        assert!(c["new"]["total_ns"].is_null() && c["time_change_pct"].is_null());
        // Two samples are no evidence.
        assert_eq!(c["verdict"], "noise");
        let sc = &c["share_change_pts"];
        assert!(sc["low"].as_f64().unwrap() < 0.0 && sc["high"].as_f64().unwrap() > 50.0);
        let names: Vec<&str> = fs.iter().map(|f| f["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["c", "a", "b", "main"]);
        let obj = v.as_object().unwrap();
        let mut keys: Vec<&String> = obj.keys().collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "base_runs",
                "base_samples",
                "confidence_pct",
                "functions",
                "gate",
                "interrupts",
                "new_runs",
                "new_samples",
                "noise",
                "notes",
                "paths",
                "schema",
                "time",
                "weight_unit"
            ]
        );
        assert!(v["time"].is_null());
        // One run a side: the dispersion is assumed, and says so.
        assert_eq!(
            v["noise"]["dispersion"],
            super::super::stats::ASSUMED_DISPERSION
        );
        assert_eq!(v["noise"]["dispersion_measured"], false);
    }
}
