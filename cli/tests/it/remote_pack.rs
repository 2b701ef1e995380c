//! Packing to and from object stores through the CLI: a cut-off upload, a merge into `s3://`,
//! an output that is a URL input's own dataset, and a repack by URL (s3s-fs and lighttpd on
//! loopback).

use crate::remote::servers::{Lighttpd, S3};
use crate::remote::{bin, sample_data};
use std::path::Path;

/// A proxy in front of the S3 server on `upstream` that cuts off every PUT of more than 1 MiB as
/// a server ending a connection mid-request does: it reads the headers, half-closes, and closes
/// with the body unread (the client, still writing, is reset after the server's FIN). Other
/// requests are forwarded, one per connection. Returns its port.
fn cutting_proxy(upstream: u16) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = proxy_one(conn, upstream);
            });
        }
    });
    port
}

fn proxy_one(mut client: std::net::TcpStream, upstream: u16) -> std::io::Result<()> {
    use std::io::{Read, Write};
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = client.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    if head.starts_with("PUT ") && length > 1 << 20 {
        client.shutdown(std::net::Shutdown::Write)?;
        std::thread::sleep(std::time::Duration::from_millis(50));
        return Ok(());
    }
    while buf.len() < end + length {
        let n = client.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let mut request: String = head
        .trim_end()
        .lines()
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .map(|l| format!("{l}\r\n"))
        .collect();
    request.push_str("Connection: close\r\n\r\n");
    let mut up = std::net::TcpStream::connect(("127.0.0.1", upstream))?;
    up.write_all(request.as_bytes())?;
    up.write_all(&buf[end..end + length])?;
    let mut response = Vec::new();
    up.read_to_end(&mut response)?;
    client.write_all(&response)
}

#[test]
fn an_upload_the_server_cuts_off_is_an_error_with_a_message_not_a_silent_death() {
    let server = S3::start();
    std::fs::create_dir_all(server.root.path().join("bucket")).unwrap();
    let proxy = cutting_proxy(server.port);
    let mut cmd = bin();
    for (k, v) in server.env() {
        cmd.env(k, v);
    }
    // One shard of about 5 MB, so the upload is still being written when the proxy cuts it.
    let out = cmd
        .env("AWS_ENDPOINT", format!("http://127.0.0.1:{proxy}"))
        .arg("pack")
        .arg(sample_data())
        .args([
            "s3://bucket/out/",
            "--resize",
            "shorter:512",
            "--encode",
            "png",
        ])
        .args(["--shard-samples", "45", "-q"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{:?}: {stderr}", out.status);
    assert!(
        stderr.contains("s3://bucket/out/shard-000000.tar") && stderr.contains("PUT"),
        "{stderr}"
    );
    let published = server.root.path().join("bucket/out");
    assert!(!published.join("shard-000000.tar").exists());
    assert!(!published.join("manifest.json").exists());
}

#[test]
fn merge_into_s3_removes_the_staged_copies_of_its_inputs() {
    use crate::common::{pack, tempdir, Cmd};
    use crate::partition::{part, published, wds_in_s3, OPTS};
    let dir = tempdir();
    let (s3, bucket) = wds_in_s3(dir.path(), 20);
    let with_env = |c: Cmd| c.envs(s3.env());
    let urls = "s3://bucket/wds/shard-{000000..000001}.tar";
    let out = "s3://bucket/out/";
    with_env(Cmd::new(["plan", urls, out]).args(OPTS)).ok();
    let staged = bucket.join("out/_plan/staged");
    let files = |d: &Path| -> usize {
        std::fs::read_dir(d)
            .map(|e| e.flatten().filter(|e| e.path().is_file()).count())
            .unwrap_or(0)
    };
    assert_eq!(files(&staged), 2, "the plan stages each input once");
    with_env(part(Path::new(out), "0/1")).ok();
    with_env(Cmd::new(["merge", out])).ok();
    assert_eq!(files(&staged), 0, "merge removes the staged copies");
    let single = dir.path().join("single");
    with_env(pack(urls, &single).args(OPTS).args(["-q"])).ok();
    for (name, bytes) in published(&single) {
        let got = std::fs::read(bucket.join("out").join(&name)).unwrap_or_default();
        assert!(got == bytes, "{name} differs from the single pack's");
    }
}

#[test]
fn overwriting_the_dataset_a_url_input_serves_is_refused_before_anything_goes() {
    use crate::common::{pack, tempdir, Cmd};
    let dir = tempdir();
    let www = dir.path().join("www");
    pack(crate::common::sample_data(), www.join("dsx"))
        .args(["--resize", "crop:16x16", "--shard-samples", "9", "-q"])
        .ok();
    let server = Lighttpd::start(&www);
    let url = server.url("dsx/");
    let r = pack(&url, www.join("dsx"))
        .args(["--overwrite", "--input-format", "wds", "-q"])
        .run();
    r.assert_code(2);
    assert!(r.stderr.contains("would take in the input"), "{}", r.stderr);
    Cmd::new(["verify"]).arg(www.join("dsx")).ok();
    // Into another folder, the same URL packs.
    pack(&url, dir.path().join("copy"))
        .args(["--input-format", "wds", "-q"])
        .ok();
}

/// Shards of a shardtool dataset re-packed by URL keep its class names (read from the manifest
/// beside them), as local ones do; mixed with shards of another dataset they map by name.
#[test]
fn a_repack_by_url_keeps_the_class_names_of_the_manifest_beside_the_shards() {
    use crate::common::{manifest, pack, sample_data, tempdir};
    let dir = tempdir();
    let s3 = S3::start();
    let bucket = s3.root.path().join("bucket");
    pack(sample_data(), bucket.join("ds"))
        .args(["--resize", "crop:16x16", "--shard-samples", "20", "-q"])
        .ok();
    let classes = manifest(&bucket.join("ds")).classes;
    assert!(
        classes.iter().all(|c| c.parse::<u32>().is_err()),
        "{classes:?}"
    );
    let out = dir.path().join("out");
    pack("s3://bucket/ds/shard-{000000..000002}.tar", &out)
        .args(["--input-format", "wds", "-q"])
        .envs(s3.env())
        .ok();
    assert_eq!(manifest(&out).classes, classes);
}
