use proptest::prelude::*;

use super::*;

const HALF: &str = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";

#[test]
fn fnv1a64_is_gos_fnv_new64a() {
    // Reference values of Go's hash/fnv New64a (and of the FNV spec's test vectors).
    assert_eq!(fnv1a64(""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a64("a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a64("foobar"), 0x8594_4171_f739_67e8);
}

#[test]
fn the_keps_splits_are_written_as_the_kep_writes_them() {
    let wires: Vec<String> = (0..4)
        .map(|i| {
            ShardSelector::nth_of(ShardField::Uid, i, 4)
                .unwrap()
                .wire()
                .unwrap()
        })
        .collect();
    assert_eq!(
        wires,
        [
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x4000000000000000')",
            "shardRange(object.metadata.uid, '0x4000000000000000', '0x8000000000000000')",
            "shardRange(object.metadata.uid, '0x8000000000000000', '0xc000000000000000')",
            "shardRange(object.metadata.uid, '0xc000000000000000', '0x10000000000000000')",
        ]
    );
    assert_eq!(
        ShardSelector::nth_of(ShardField::Uid, 0, 2)
            .unwrap()
            .wire()
            .unwrap(),
        HALF
    );
    assert!(ShardSelector::nth_of(ShardField::Uid, 3, 3).is_err());
    assert!(ShardSelector::nth_of(ShardField::Uid, 0, 0).is_err());
}

#[test]
fn parses_what_kube_apiserver_parses() {
    let ok = [
        (HALF, vec![(0, 1u128 << 63)]),
        (
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')",
            vec![(0, HASH_SPACE_END)],
        ),
        (
            "shardRange(object.metadata.uid,'0x0000000000000000','0x8000000000000000')",
            vec![(0, 1 << 63)],
        ),
        (
            "  shardRange( object.metadata.uid ,  '0x0000000000000000' ,  '0x8000000000000000' )  ",
            vec![(0, 1 << 63)],
        ),
        (
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x0000000000000005') || shardRange(object.metadata.uid, '0x000000000000000a', '0x000000000000000f')",
            vec![(0, 5), (10, 15)],
        ),
        (
            "(shardRange(object.metadata.uid, '0x0000000000000000', '0x0000000000000005') || (shardRange(object.metadata.uid, '0x000000000000000a', '0x000000000000000f')))",
            vec![(0, 5), (10, 15)],
        ),
    ];
    for (input, want) in ok {
        let sel = ShardSelector::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
        let got: Vec<(u64, u128)> = sel.ranges().iter().map(|r| (r.start(), r.end())).collect();
        assert_eq!(got, want, "{input}");
        assert_eq!(sel.field(), ShardField::Uid);
    }
    let ns = ShardSelector::parse(
        "shardRange(object.metadata.namespace, '0x00000000000000aa', '0x00000000000000ff')",
    )
    .unwrap();
    assert_eq!(ns.field(), ShardField::Namespace);
    assert_eq!(
        ns.wire().unwrap(),
        "shardRange(object.metadata.namespace, '0x00000000000000aa', '0x00000000000000ff')"
    );
}

#[test]
fn refuses_what_kube_apiserver_refuses() {
    let bad = [
        ("", "empty shard selector"),
        ("   ", "empty shard selector"),
        (
            "shardRange(object.metadata.uid, '0000000000000000', '0x8000000000000000')",
            "hexStart must have '0x' prefix",
        ),
        (
            "shardRange(object.metadata.uid, '0x0000000000000000', '8000000000000000')",
            "hexEnd must have '0x' prefix",
        ),
        (
            "shardRange(object.metadata.uid, '0x', '0x8000000000000000')",
            "hex value is required after '0x'",
        ),
        (
            "shardRange(object.metadata.name, '0x00', '0x80')",
            "unsupported field path \"object.metadata.name\"",
        ),
        (
            "invalidFunc(object.metadata.uid, '0x00', '0x80')",
            "unsupported function \"invalidFunc\"",
        ),
        (
            "shardRange(object.metadata.uid, '0x000000000000000000', '0x80')",
            "hex value too long (18 chars, max 17)",
        ),
        (
            "shardRange(object.metadata.uid, '0x0g', '0x80')",
            "invalid hex character 'g'",
        ),
        (
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') && shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')",
            "syntax error",
        ),
        (
            "shardRange(object.metadata.uid, 0, 8)",
            "must be a string literal",
        ),
        ("object.metadata.uid > '0x0'", "unsupported function"),
        ("shardRange(object.metadata.uid, '0x0')", "hexStart"),
        (
            "shardRange(object.metadata.uid, '0x0000000000000000')",
            "expected \",\"",
        ),
        (
            "shardRange(object.metadata.uid, hex(0), '0x8')",
            "must be a string literal",
        ),
        (
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')",
            "all shard ranges must use the same field",
        ),
        (
            "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')",
            "did you mean \"0x0000000000000000\"",
        ),
        (
            "shardRange(object.metadata.uid, '0x0000000000000000', '0xff')",
            "hexEnd must be",
        ),
        (
            "shardRange(object.metadata.uid, '0x8000000000000000', '0x8000000000000000')",
            "must be less than end",
        ),
        (
            "shardRange(object.metadata.uid, '0xffffffffffffffff', '0x0000000000000000')",
            "must be less than end",
        ),
        (
            "shardRange(object.metadata.uid, '0x10000000000000000', '0x10000000000000000')",
            "must be less than end",
        ),
        (
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000001')",
            "must be '0x10000000000000000'",
        ),
        (
            "shardRange(object.metadata.uid, '0x000000000000000A', '0x8000000000000000')",
            "invalid hex character 'A'",
        ),
    ];
    for (input, want) in bad {
        let err = ShardSelector::parse(input).expect_err(input).to_string();
        assert!(err.contains(want), "{input}: {err:?} lacks {want:?}");
    }
}

#[test]
fn the_wire_form_round_trips_and_adjacent_ranges_merge() {
    let sel = ShardSelector::parse(HALF).unwrap();
    assert_eq!(sel.wire().unwrap(), HALF);
    assert_eq!(sel.to_string().parse::<ShardSelector>().unwrap(), sel);
    let two = ShardSelector::parse(
        "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000') || shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
    )
    .unwrap();
    assert!(two.is_everything());
    assert_eq!(two, ShardSelector::everything(ShardField::Uid));
    assert!(ShardSelector::nothing(ShardField::Uid).wire().is_none());
    assert!(
        ShardSelector::nothing(ShardField::Namespace)
            .to_string()
            .contains("no shard")
    );
}

#[test]
fn matching_hashes_the_chosen_field() {
    let lower = ShardSelector::nth_of(ShardField::Namespace, 0, 2).unwrap();
    let upper = ShardSelector::nth_of(ShardField::Namespace, 1, 2).unwrap();
    for ns in ["default", "kube-system", "demo", "a", ""] {
        let in_lower = fnv1a64(ns) < (1 << 63);
        assert_eq!(lower.matches(Some("any-uid"), Some(ns)), in_lower, "{ns}");
        assert_eq!(upper.matches(Some("any-uid"), Some(ns)), !in_lower, "{ns}");
    }
    // Cluster-scoped objects hash "" (kube-apiserver's accessor returns "").
    assert_eq!(lower.matches(None, None), lower.matches_value(""));
    let by_uid = ShardSelector::nth_of(ShardField::Uid, 0, 2).unwrap();
    assert_eq!(
        by_uid.matches(Some("u-1"), Some("default")),
        by_uid.matches_value("u-1")
    );
}

#[test]
fn algebra_refuses_mixed_fields() {
    let a = ShardSelector::everything(ShardField::Uid);
    let b = ShardSelector::everything(ShardField::Namespace);
    assert!(matches!(a.union(&b), Err(ShardError::MixedFields { .. })));
    assert!(a.difference(&b).is_err());
    assert!(a.intersection(&b).is_err());
}

fn arb_range() -> impl Strategy<Value = HashRange> {
    // Bounds drawn from a small set of points (and the edges) so ranges overlap and touch.
    let point = prop_oneof![
        Just(0u128),
        Just(HASH_SPACE_END),
        (0u128..16).prop_map(|i| i << 60),
        any::<u64>().prop_map(u128::from),
    ];
    (point.clone(), point).prop_filter_map("non-empty", |(a, b)| {
        let (s, e) = if a < b { (a, b) } else { (b, a) };
        HashRange::new(u64::try_from(s).ok()?, e).ok()
    })
}

fn arb_selector() -> impl Strategy<Value = ShardSelector> {
    prop::collection::vec(arb_range(), 0..5).prop_map(|r| ShardSelector::new(ShardField::Uid, r))
}

/// The model: a hash is in a selector when it is in any of the ranges it was built from.
fn model(ranges: &[HashRange], h: u64) -> bool {
    ranges.iter().any(|r| r.contains(h))
}

/// Hashes worth probing: every bound, its neighbours, and some random ones.
fn probes(sels: &[&ShardSelector], extra: &[u64]) -> Vec<u64> {
    let mut out = extra.to_vec();
    out.extend([0, u64::MAX]);
    for s in sels {
        for r in s.ranges() {
            let e = u64::try_from(r.end().min(u128::from(u64::MAX))).unwrap_or(u64::MAX);
            out.extend([
                r.start(),
                r.start().wrapping_sub(1),
                r.start().wrapping_add(1),
                e,
                e.wrapping_sub(1),
            ]);
        }
    }
    out
}

proptest! {
    #[test]
    fn normalized_ranges_select_what_their_parts_select(
        parts in prop::collection::vec(arb_range(), 0..6),
        extra in prop::collection::vec(any::<u64>(), 8),
    ) {
        let sel = ShardSelector::new(ShardField::Uid, parts.clone());
        // Sorted, disjoint and not adjacent.
        for w in sel.ranges().windows(2) {
            prop_assert!(w[0].end() < u128::from(w[1].start()));
        }
        for h in probes(&[&sel], &extra) {
            prop_assert_eq!(sel.contains_hash(h), model(&parts, h), "hash {:#x}", h);
        }
        // The wire form parses back to the same selector.
        if let Some(w) = sel.wire() {
            prop_assert_eq!(ShardSelector::parse(&w).unwrap(), sel);
        } else {
            prop_assert!(sel.is_empty());
        }
    }

    #[test]
    fn union_difference_and_intersection_follow_the_sets(
        a in arb_selector(),
        b in arb_selector(),
        extra in prop::collection::vec(any::<u64>(), 8),
    ) {
        let u = a.union(&b).unwrap();
        let d = a.difference(&b).unwrap();
        let i = a.intersection(&b).unwrap();
        for h in probes(&[&a, &b], &extra) {
            let (x, y) = (a.contains_hash(h), b.contains_hash(h));
            prop_assert_eq!(u.contains_hash(h), x || y, "union at {:#x}", h);
            prop_assert_eq!(d.contains_hash(h), x && !y, "difference at {:#x}", h);
            prop_assert_eq!(i.contains_hash(h), x && y, "intersection at {:#x}", h);
        }
        let frac = a.fraction();
        prop_assert!((0.0..=1.0).contains(&frac));
    }

    #[test]
    fn n_equal_shards_partition_the_space(n in 1u64..40, h in any::<u64>()) {
        let owners = (0..n)
            .filter(|&i| ShardSelector::nth_of(ShardField::Uid, i, n).unwrap().contains_hash(h))
            .count();
        prop_assert_eq!(owners, 1);
    }
}
