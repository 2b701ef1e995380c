//! The cache against a real S3-compatible server (s3s-fs, signatures checked) on loopback.
//! Its own test binary: the S3 client reads the AWS environment, which this file sets.

mod common;
mod fixture;

use common::S3;
use fixture::make_dataset;
use shardtool_cache::{CacheError, CacheOptions, Location, RemoteDataset};
use shardtool_core::Checksum;

#[test]
fn reads_a_dataset_from_s3_with_signed_requests() {
    let server = S3::start();
    // A bucket is a folder of the server's root: fixture files placed there are served.
    let shards = make_dataset(
        &server.root.path().join("bucket/datasets/ds"),
        &[120_000, 90_000],
        &[0],
    );
    for (k, v) in server.env() {
        // SAFETY of set_var: this test binary has one test, which sets the variables first.
        std::env::set_var(k, v);
    }
    let cache = tempfile::tempdir().unwrap();
    let open = |url: &str| match Location::parse(url).unwrap() {
        Location::Remote(r) => RemoteDataset::open(
            r,
            CacheOptions {
                dir: cache.path().to_path_buf(),
                concurrency: 0,
                ..Default::default()
            },
        ),
        l => panic!("{l:?}"),
    };
    let ds = open("s3://bucket/datasets/ds").unwrap();
    for (i, want) in shards.iter().enumerate() {
        let lease = ds.acquire(i).unwrap();
        let got = std::fs::read(lease.path()).unwrap();
        assert_eq!(Checksum::of(&got), Checksum::of(want));
    }
    assert_eq!(ds.metrics().misses, 2);

    // The same bucket path on another endpoint is another dataset: cached apart, each read
    // right, and listed with its endpoint.
    let other = S3::start();
    let other_shards = make_dataset(
        &other.root.path().join("bucket/datasets/ds"),
        &[70_000],
        &[0],
    );
    for (k, v) in other.env() {
        std::env::set_var(k, v);
    }
    let ds2 = open("s3://bucket/datasets/ds").unwrap();
    let got = std::fs::read(ds2.acquire(0).unwrap().path()).unwrap();
    assert_eq!(Checksum::of(&got), Checksum::of(&other_shards[0]));
    let listed: Vec<String> = shardtool_cache::CacheDir::existing(cache.path())
        .unwrap()
        .list()
        .unwrap()
        .into_iter()
        .map(|d| d.source)
        .collect();
    let endpoint = |s: &S3| {
        format!(
            "s3://bucket/datasets/ds/ (endpoint http://127.0.0.1:{})",
            s.port
        )
    };
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(
        listed.contains(&endpoint(&server)) && listed.contains(&endpoint(&other)),
        "{listed:?}"
    );
    let got = std::fs::read(ds.acquire(1).unwrap().path()).unwrap();
    assert_eq!(Checksum::of(&got), Checksum::of(&shards[1]));
    drop((ds, ds2));
    for (k, v) in server.env() {
        std::env::set_var(k, v);
    }

    // Wrong credentials are refused by the server and reported, not retried forever.
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "wrong");
    let e = open("s3://bucket/datasets/ds/manifest.json")
        .err()
        .expect("refused");
    assert!(matches!(e, CacheError::Fetch { .. }), "{e}");
    assert!(e.to_string().contains("manifest.json"), "{e}");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", common::S3_SECRET);

    // A missing dataset names the manifest URL.
    let e = open("s3://bucket/nope").err().expect("missing");
    assert!(
        e.to_string().contains("s3://bucket/nope/manifest.json"),
        "{e}"
    );
}
