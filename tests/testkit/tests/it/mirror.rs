use std::net::TcpStream;

use kubexm_testkit::{Fault, HttpMirror};

use crate::{get, parse_response, pattern, request};

fn mirror_with_file(len: usize) -> (tempfile::TempDir, HttpMirror, Vec<u8>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let content = pattern(len);
    fs_err::create_dir_all(dir.path().join("dl/v1")).expect("mkdir");
    fs_err::write(dir.path().join("dl/v1/file.bin"), &content).expect("write file");
    let mirror = HttpMirror::start(dir.path());
    (dir, mirror, content)
}

const FILE: &str = "/dl/v1/file.bin";

#[test]
fn serves_full_head_and_range_requests() {
    let (_dir, mirror, content) = mirror_with_file(1000);
    let url = mirror.url(FILE);
    assert_eq!(url, format!("{}{FILE}", mirror.base_url()));
    assert!(mirror.base_url().starts_with("http://127.0.0.1:"));

    let full = get(&url);
    assert_eq!(full.status, 200);
    assert_eq!(full.content_length(), 1000);
    assert_eq!(full.body, content);

    let head = request("HEAD", &url, &[]);
    assert_eq!(head.status, 200);
    assert_eq!(head.content_length(), 1000);
    assert!(head.body.is_empty());

    let tail = request("GET", &url, &[("Range", "bytes=100-")]);
    assert_eq!(tail.status, 206);
    assert_eq!(tail.header("content-range"), Some("bytes 100-999/1000"));
    assert_eq!(tail.content_length(), 900);
    assert_eq!(tail.body, content[100..]);

    let middle = request("GET", &url, &[("Range", "bytes=10-19")]);
    assert_eq!(middle.status, 206);
    assert_eq!(middle.header("content-range"), Some("bytes 10-19/1000"));
    assert_eq!(middle.content_length(), 10);
    assert_eq!(middle.body, content[10..20]);

    let beyond = request("GET", &url, &[("Range", "bytes=1000-")]);
    assert_eq!(beyond.status, 416);
    assert_eq!(beyond.header("content-range"), Some("bytes */1000"));

    assert_eq!(get(&mirror.url("missing.bin")).status, 404);
    assert_eq!(get(&mirror.url("/dl/../dl/v1/file.bin")).status, 404);
    assert_eq!(request("POST", &url, &[]).status, 405);

    assert_eq!(mirror.requests_for(FILE), 6);
    assert_eq!(mirror.requests_for("dl/v1/file.bin"), 6);
    assert_eq!(mirror.requests_for("/missing.bin"), 1);
    assert_eq!(mirror.requests(), 8);
    assert_eq!(
        mirror.ranges_for(FILE),
        vec![
            None,
            None,
            Some("bytes=100-".to_owned()),
            Some("bytes=10-19".to_owned()),
            Some("bytes=1000-".to_owned()),
            None,
        ]
    );
    assert_eq!(mirror.request_log()[1].method, "HEAD");

    mirror.reset_counts();
    assert_eq!(mirror.requests(), 0);
    assert_eq!(mirror.requests_for(FILE), 0);
}

#[test]
fn faults_are_served_once_each_in_order() {
    let (_dir, mirror, content) = mirror_with_file(1000);
    let url = mirror.url(FILE);
    mirror.inject(FILE, Fault::NotFound);
    mirror.inject(FILE, Fault::Status(500));
    mirror.inject("dl/v1/file.bin", Fault::Unauthorized);
    mirror.inject(FILE, Fault::Corrupt);
    mirror.inject("/other.bin", Fault::Status(503));
    assert_eq!(mirror.pending_faults(FILE), 4);

    assert_eq!(get(&url).status, 404);
    assert_eq!(get(&url).status, 500);
    let unauthorized = get(&url);
    assert_eq!(unauthorized.status, 401);
    assert!(unauthorized
        .header("www-authenticate")
        .is_some_and(|v| v.starts_with("Basic")));

    let corrupt = get(&url);
    assert_eq!(corrupt.status, 200);
    assert_eq!(corrupt.content_length(), 1000);
    assert_eq!(corrupt.body.len(), 1000);
    let differing = corrupt
        .body
        .iter()
        .zip(&content)
        .filter(|(a, b)| a != b)
        .count();
    assert_eq!(differing, 1, "exactly one byte is flipped");
    assert_eq!(mirror.pending_faults(FILE), 0);

    // Queue drained: normal service again; the other path's fault is untouched.
    assert_eq!(get(&url).body, content);
    assert_eq!(mirror.pending_faults("other.bin"), 1);
    assert_eq!(mirror.requests_for(FILE), 5);

    mirror.inject(FILE, Fault::Status(502));
    mirror.clear_faults();
    assert_eq!(get(&url).status, 200);
}

#[test]
fn cut_after_sends_full_length_then_closes_and_range_resumes() {
    let (_dir, mirror, content) = mirror_with_file(1000);
    let url = mirror.url(FILE);
    mirror.inject(FILE, Fault::CutAfter(300));

    let cut = get(&url);
    assert_eq!(cut.status, 200);
    assert_eq!(
        cut.content_length(),
        1000,
        "headers announce the full length"
    );
    assert_eq!(cut.body, content[..300], "only 300 bytes, then EOF");

    let resumed = request("GET", &url, &[("Range", "bytes=300-")]);
    assert_eq!(resumed.status, 206);
    assert_eq!(resumed.header("content-range"), Some("bytes 300-999/1000"));
    let mut whole = cut.body;
    whole.extend_from_slice(&resumed.body);
    assert_eq!(whole, content);
    assert_eq!(
        mirror.ranges_for(FILE),
        vec![None, Some("bytes=300-".to_owned())]
    );

    // A cut also applies to a ranged response: N bytes of the range.
    mirror.inject(FILE, Fault::CutAfter(5));
    let cut_range = request("GET", &url, &[("Range", "bytes=990-")]);
    assert_eq!(cut_range.status, 206);
    assert_eq!(cut_range.content_length(), 10);
    assert_eq!(cut_range.body, content[990..995]);
}

#[tokio::test]
async fn usable_from_an_async_test() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (_dir, mirror, content) = mirror_with_file(4096);
    mirror.inject(FILE, Fault::CutAfter(1000));
    let mut stream = tokio::net::TcpStream::connect(mirror.addr())
        .await
        .expect("connect");
    stream
        .write_all(format!("GET {FILE} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .expect("send");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read");
    let response = parse_response(&raw);
    assert_eq!(response.content_length(), 4096);
    assert_eq!(response.body, content[..1000]);
    assert_eq!(mirror.requests_for(FILE), 1);
}

#[test]
fn drop_stops_the_server() {
    let (_dir, mirror, _) = mirror_with_file(10);
    let addr = mirror.addr();
    assert_eq!(get(&mirror.url(FILE)).status, 200);
    drop(mirror);
    assert!(
        TcpStream::connect(addr).is_err(),
        "nothing listens after Drop"
    );
}
