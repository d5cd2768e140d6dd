//! Tests of the differential flamegraph: every drawn frame, inner ones
//! included, carries the color and tooltip of its own stack path.

use std::path::Path;

use super::*;

fn side(text: &str) -> Side {
    Side::from_folded(text.as_bytes(), Path::new("t")).unwrap()
}

fn draw(base: &str, new: &str) -> String {
    let (base, new) = (side(base), side(new));
    let diff = Diff::new(&base, &new);
    let mut out = Vec::new();
    write_diff_svg(&base, &new, &diff, &SvgOptions::default(), &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// (tooltip, fill) of every drawn frame, in document order.
fn frames(svg: &str) -> Vec<(String, String)> {
    svg.split("<title>")
        .skip(1)
        .filter_map(|part| {
            let (title, rest) = part.split_once("</title>")?;
            let rect = rest.strip_prefix("<rect ")?;
            let fill = rect.split_once("fill=\"")?.1.split_once('"')?.0;
            Some((title.to_string(), fill.to_string()))
        })
        .collect()
}

/// The fill of the frames whose tooltip starts with `name (`; all must agree.
#[track_caller]
fn fill_of(frames: &[(String, String)], name: &str) -> String {
    let fills: Vec<&String> = frames
        .iter()
        .filter(|(t, _)| t.starts_with(&format!("{name} (")))
        .map(|(_, f)| f)
        .collect();
    assert!(!fills.is_empty(), "no frame {name} in {frames:?}");
    assert!(fills.iter().all(|f| *f == fills[0]), "{name}: {fills:?}");
    fills[0].clone()
}

#[track_caller]
fn every_frame_is_annotated(frames: &[(String, String)]) {
    for (title, _) in frames {
        assert!(
            title.starts_with("all (") || title.contains(" pts"),
            "frame without its change: {title}"
        );
    }
}

#[test]
fn inner_frames_are_colored_by_their_own_change() {
    let svg = draw(
        "p;main;run;x 50\np;main;other 50\n",
        "p;main;run;x 25\np;main;run;y 50\np;main;other 25\n",
    );
    let f = frames(&svg);
    every_frame_is_annotated(&f);
    // Largest change: y, +50 points, fully saturated.
    assert_eq!(fill_of(&f, "y"), "rgb(255,100,100)");
    // run grew by 25 points although its old child x shrank.
    assert_eq!(fill_of(&f, "run"), "rgb(255,175,175)");
    assert_eq!(fill_of(&f, "x"), "rgb(175,175,255)");
    assert_eq!(fill_of(&f, "other"), "rgb(175,175,255)");
    assert_eq!(fill_of(&f, "main"), "rgb(250,250,250)");
    assert_eq!(fill_of(&f, "p"), "rgb(250,250,250)");
    assert_eq!(fill_of(&f, "all"), "rgb(250,250,250)");
    let titles: Vec<&str> = f.iter().map(|(t, _)| t.as_str()).collect();
    assert!(
        titles.contains(&"run (75 samples, 75.00%; +25.00 pts)"),
        "{titles:?}"
    );
    assert!(
        titles.contains(&"y (50 samples, 50.00%; +50.00 pts, new)"),
        "{titles:?}"
    );
}

#[test]
fn recursive_frames_at_the_same_place_are_told_apart_by_depth() {
    // f;f keeps its share; the third f is new. All three start at sample 0
    // with the same width.
    let svg = draw("p;f;f 10\n", "p;f;f;f 10\n");
    let f = frames(&svg);
    every_frame_is_annotated(&f);
    let fs: Vec<&(String, String)> = f.iter().filter(|(t, _)| t.starts_with("f (")).collect();
    assert_eq!(fs.len(), 3, "{f:?}");
    let news = fs.iter().filter(|(t, _)| t.ends_with("new)")).count();
    assert_eq!(news, 1, "{fs:?}");
    for (title, fill) in fs {
        if title.ends_with("new)") {
            assert_eq!(fill, "rgb(255,100,100)");
        } else {
            assert_eq!(fill, "rgb(250,250,250)", "{title}");
        }
    }
}

#[test]
fn small_changes_stay_pale() {
    // +0.5 points at most: half way to the one-point scale floor.
    let svg = draw("p;a 500\np;b 500\n", "p;a 505\np;b 495\n");
    let f = frames(&svg);
    assert_eq!(fill_of(&f, "a"), "rgb(255,175,175)");
    assert_eq!(fill_of(&f, "b"), "rgb(175,175,255)");
}

#[test]
fn vanished_functions_are_named_in_the_subtitle() {
    let svg = draw("p;main;gone 30\np;main;kept 70\n", "p;main;kept 10\n");
    assert!(
        svg.contains("Vanished: gone (-30.00)"),
        "{}",
        svg.lines().find(|l| l.contains("subtitle")).unwrap_or("")
    );
    let svg = draw("p;main 1\n", "p;main 1\n");
    assert!(svg.contains("Nothing vanished."));
    let many: String = (0..8).map(|i| format!("p;gone{i} 1\n")).collect();
    let svg = draw(&format!("{many}p;kept 2\n"), "p;kept 1\n");
    assert!(svg.contains(" and 3 more"));
}

#[test]
fn odd_frame_names_keep_every_frame_matched() {
    // A leaf ending in a number (inferno would read a second count), frames
    // with spaces that sort before `;` (inferno draws `a` twice), markup.
    let svg = draw(
        "p;a 1\np;a;d 1\n",
        "p;a 1\np;a b;c 1\np;a;d 1\np;<T as Tr>::f & g;leaf 7 3\n",
    );
    let f = frames(&svg);
    every_frame_is_annotated(&f);
    assert_eq!(f.iter().filter(|(t, _)| t.starts_with("a (")).count(), 2);
    assert!(f
        .iter()
        .any(|(t, _)| t.starts_with("&lt;T as Tr&gt;::f &amp; g (")));
}

#[test]
fn stacks_that_sort_differently_with_their_counts_still_draw() {
    // By whole line `p;a 9` sorts after `p;a 7x 1`, by stack before it;
    // inferno checks the latter. Tabs inside inner frames likewise.
    let svg = draw("p;a 1\n", "p;a 9\np;a 7x 1\np;a\t;b 2\np;a;c 3\n");
    let f = frames(&svg);
    every_frame_is_annotated(&f);
    assert_eq!(fill_of(&f, "c"), "rgb(255,100,100)");
}

#[test]
fn an_empty_new_side_draws_a_placeholder() {
    let svg = draw("p;a 1\n", "");
    assert!(svg.contains("<svg"), "{svg}");
}

#[test]
fn random_stacks_of_awkward_frames_are_all_matched() {
    const FRAMES: [&str; 12] = [
        "a", "a 7", "a 7x", "a\t", "# x", "#", "", " b", "b", "<&>", "9", "x.5",
    ];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    for round in 0..300 {
        let mut make = || {
            let stacks: Vec<(String, u64)> = (0..1 + next(12))
                .map(|_| {
                    let depth = 1 + next(5);
                    let frames: Vec<&str> =
                        (0..depth).map(|_| FRAMES[next(FRAMES.len())]).collect();
                    (frames.join(";"), 1 + next(20) as u64)
                })
                .collect();
            Side {
                kind: super::super::SideKind::Folded,
                runs: vec![super::super::Run {
                    label: "t".to_string(),
                    stacks: stacks.clone(),
                    event: None,
                    frequency_hz: 0,
                    ns_per_weight: None,
                    samples: stacks.iter().map(|s| s.1).sum(),
                }],
                stacks,
                functions: None,
                weight_unit: "samples".to_string(),
                warnings: Vec::new(),
            }
        };
        let (base, new) = (make(), make());
        let diff = Diff::new(&base, &new);
        let mut out = Vec::new();
        write_diff_svg(&base, &new, &diff, &SvgOptions::default(), &mut out)
            .unwrap_or_else(|e| panic!("round {round}: {e}: {:?}", new.stacks));
        let svg = String::from_utf8(out).unwrap();
        let f = frames(&svg);
        assert!(f.len() > 1, "round {round}: {:?}", new.stacks);
        every_frame_is_annotated(&f);
    }
}
