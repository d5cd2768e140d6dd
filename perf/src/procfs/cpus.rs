//! CPU lists (`0-3,8,10-11`, as /sys and /proc print them) and the CPUs
//! that are online.

use std::fs;

/// The CPUs a list names, in its order; parts that do not parse are left
/// out.
pub fn parse_cpu_list(text: &str) -> Vec<u32> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let mut ends = part.splitn(2, '-').map(|x| x.trim().parse::<u32>());
        match (ends.next(), ends.next()) {
            (Some(Ok(a)), Some(Ok(b))) if a <= b => cpus.extend(a..=b),
            (Some(Ok(a)), None) => cpus.push(a),
            _ => {}
        }
    }
    cpus
}

/// CPUs that are online, from /sys; where it cannot say, as many as the
/// process may run on, from 0.
pub fn online_cpus() -> Vec<u32> {
    let text = fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let cpus = parse_cpu_list(&text);
    if !cpus.is_empty() {
        return cpus;
    }
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    (0..n as u32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_with_ranges_singles_and_garbage() {
        assert_eq!(parse_cpu_list("0-3,8,10-11\n"), [0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpu_list("5"), [5]);
        // The kernel's formats (possible, online, Cpus_allowed_list).
        assert_eq!(parse_cpu_list("0\n"), [0]);
        assert_eq!(parse_cpu_list("0-3\n"), [0, 1, 2, 3]);
        assert_eq!(parse_cpu_list("0,2-5,7\n"), [0, 2, 3, 4, 5, 7]);
        assert_eq!(parse_cpu_list("3-1,x,2"), [2]);
        assert!(parse_cpu_list("").is_empty());
        assert!(!online_cpus().is_empty());
    }
}
