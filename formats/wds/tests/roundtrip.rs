//! Writer ⇄ reader round trips and hostile-input checks for the tar format.

use proptest::prelude::*;
use shardtool_wds::{
    group_samples, split_name, tar_bytes, EntryKind, ReadError, TarReader, TarWriter, BLOCK,
};

fn archive(members: &[(&str, Vec<u8>)]) -> Vec<u8> {
    tar_bytes(members.iter().map(|(n, d)| (n, d))).unwrap()
}

#[test]
fn members_round_trip_and_sizes_are_predicted() {
    let members = vec![
        ("000000001.cls", b"3".to_vec()),
        ("000000001.jpg", vec![7u8; 1000]),
        ("000000001.json", br#"{"a":1}"#.to_vec()),
        ("000000002.cls", b"0".to_vec()),
        ("000000002.jpg", vec![9u8; 512]),
    ];
    let bytes = archive(&members);
    let predicted: u64 = members
        .iter()
        .map(|(_, d)| TarWriter::<Vec<u8>>::member_size(d.len() as u64))
        .sum::<u64>()
        + 2 * BLOCK as u64;
    assert_eq!(bytes.len() as u64, predicted);
    assert_eq!(bytes.len() % BLOCK, 0);

    let entries: Vec<_> = TarReader::new(&bytes).collect::<Result<_, _>>().unwrap();
    assert_eq!(entries.len(), members.len());
    for (e, (name, data)) in entries.iter().zip(&members) {
        assert_eq!(e.name, *name);
        assert_eq!(e.kind, EntryKind::Regular);
        assert_eq!(e.data, &data[..]);
    }
    let (samples, err) = group_samples(&bytes);
    assert!(err.is_none());
    assert_eq!(samples.len(), 2);
    assert_eq!(samples[0].key, "000000001");
    assert_eq!(samples[0].get("cls"), Some(&b"3"[..]));
    assert_eq!(samples[1].get("jpg").map(<[u8]>::len), Some(512));
    assert_eq!(samples[1].get("json"), None);
}

#[test]
fn output_is_deterministic() {
    let m = vec![("k.bin", vec![1u8, 2, 3])];
    assert_eq!(archive(&m), archive(&m));
}

#[test]
fn split_name_follows_the_webdataset_rule() {
    assert_eq!(split_name("d.1/x.seg.png"), ("d.1/x", "seg.png"));
    assert_eq!(split_name("abc.jpg"), ("abc", "jpg"));
    assert_eq!(split_name("abc"), ("abc", ""));
}

#[test]
fn corrupted_header_is_reported_not_panicked() {
    let mut bytes = archive(&[("a.txt", b"hello".to_vec())]);
    bytes[10] ^= 0xff;
    let first = TarReader::new(&bytes).next().unwrap();
    assert_eq!(first.unwrap_err(), ReadError::BadChecksum { offset: 0 });
}

#[test]
fn truncated_member_is_reported() {
    let bytes = archive(&[("a.bin", vec![5u8; 2000])]);
    let cut = &bytes[..BLOCK + 100];
    let first = TarReader::new(cut).next().unwrap();
    assert!(matches!(first, Err(ReadError::Truncated { .. })));
}

#[test]
fn rejects_names_that_do_not_fit() {
    let mut w = TarWriter::new(Vec::new());
    assert!(w.append(&"x".repeat(101), b"").is_err());
    assert!(w.append("", b"").is_err());
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        for e in TarReader::new(&bytes).flatten() {
            prop_assert!(e.data.len() <= bytes.len());
        }
        let _ = group_samples(&bytes);
    }

    #[test]
    fn mutated_archives_never_panic(pos in 0usize..3072, val: u8, cut in 0usize..3072) {
        let mut bytes = archive(&[("a.cls", b"1".to_vec()), ("a.jpg", vec![3u8; 700])]);
        let p = pos % bytes.len();
        bytes[p] = val;
        bytes.truncate(cut.min(bytes.len()));
        let _ = group_samples(&bytes);
    }
}
