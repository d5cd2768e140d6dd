//! Maps as user space sees them: a hash map's elements set, read and
//! removed. Needs root (or CAP_BPF); where BPF is refused the test fails
//! with the cause unless `FLAMEREC_SKIP_BPF_TESTS=1`.

use flamerec_bpf::{Map, MapKind};
use flamerec_testkit::{skip_or_fail, SKIP_BPF};

#[test]
fn hash_elements_are_set_read_and_removed() {
    let map = match Map::new(MapKind::Hash, 4, 8, 16) {
        Ok(m) => m,
        Err(e) => {
            skip_or_fail(
                SKIP_BPF,
                format!("BPF is not usable here, so this test cannot run (as root it is): {e}"),
            );
            return;
        }
    };
    let key = 7u32.to_ne_bytes();
    assert_eq!(map.get(&key).expect("read"), None);
    map.set(&key, &42u64.to_ne_bytes()).expect("set");
    assert_eq!(
        map.get(&key).expect("read"),
        Some(42u64.to_ne_bytes().to_vec())
    );
    assert!(map.remove(&key).expect("remove"));
    assert!(
        !map.remove(&key).expect("remove again"),
        "nothing left to remove"
    );
    assert_eq!(map.get(&key).expect("read"), None);
    assert!(
        map.set(&[0; 3], &[0; 8]).is_err(),
        "a key of the wrong size is refused"
    );
}
