// What the sample programs share, written once: each program includes this
// file (`include!("../work.rs")`), so it stays one source that `rustc`
// compiles alone (flamerec-samples builds them so, with and without frame
// pointers) as well as through cargo. Not every program uses every item.

/// Xorshift steps over the whole state per unit: large enough that call overhead is noise.
#[allow(dead_code)]
const STEPS_PER_UNIT: u32 = 1024;

#[allow(dead_code)]
type State = [u64; 8];

#[allow(dead_code)]
const SEED: State = [
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
    0x4528_21e6_38d0_1377,
    0xbe54_66cf_34e9_0c6c,
    0xc0ac_29b7_c97c_50dd,
    0x3f84_d5b5_b547_0917,
];

/// The loop body of every work function, written out in each by a macro rather than by a
/// shared `#[inline(always)]` function: with debug info, that would be one more (inlined)
/// frame, and the leaf of every sample. `while` loops rather than iterators for the same
/// reason: an iterator's inlined `next` would show as std's frames. `salt` differs per
/// caller only so that LLVM cannot merge the functions into one symbol; it is an equally
/// sized constant, so the cost is identical. `steps` (default [`STEPS_PER_UNIT`]) is the
/// inner loop's length per unit.
#[allow(unused_macros)]
macro_rules! units_of_work {
    ($state:expr, $units:expr, $salt:expr) => {
        units_of_work!($state, $units, STEPS_PER_UNIT, $salt)
    };
    ($state:expr, $units:expr, $steps:expr, $salt:expr) => {
        let mut unit = 0;
        while unit < $units {
            // Opaque per unit: the compiler can neither fold units together nor skip one.
            let state: &mut State = black_box(&mut *$state);
            let mut step = 0;
            while step < $steps {
                let mut i = 0;
                while i < state.len() {
                    let mut x = state[i];
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    state[i] = x ^ $salt;
                    i += 1;
                }
                step += 1;
            }
            unit += 1;
        }
    };
}

/// Runs `units` units from the seed and returns a checksum of the state.
#[allow(unused_macros)]
macro_rules! checksum_of_work {
    ($units:expr, $salt:expr) => {{
        let mut state = SEED;
        units_of_work!(&mut state, $units, $salt);
        state[0] ^ state[1] ^ state[2] ^ state[3] ^ state[4] ^ state[5] ^ state[6] ^ state[7]
    }};
}

/// `--units N` (or `--units=N`) from the arguments; `default` without one.
#[allow(dead_code)]
fn parse_units(mut args: impl Iterator<Item = String>, default: u64) -> Result<u64, String> {
    let mut units = default;
    while let Some(arg) = args.next() {
        let value = match arg.as_str() {
            "--units" => args.next().ok_or("--units needs a value")?,
            other => match other.strip_prefix("--units=") {
                Some(value) => value.to_owned(),
                None => return Err(format!("unexpected argument {other:?}")),
            },
        };
        units = value
            .parse()
            .map_err(|_| format!("--units: {value:?} is not a non-negative integer"))?;
    }
    Ok(units)
}
