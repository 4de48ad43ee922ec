//! The batcher shares batches across requests and sends every result back to its own request and
//! index. Batch sizes are read from the server's own histogram on /metrics.

use crate::common;

use common::{ServerConfig, camera_photos, cosine, item, scrape, series, store_keyed};

#[test]
fn two_concurrent_requests_share_one_batch_and_get_their_own_results() {
    let photos = camera_photos(6);
    let (store, keys) = store_keyed(&photos, |i, _| format!("p{i}.jpg"));
    // A batch runs when 6 photos are queued; the long wait makes sure neither request alone can
    // start one, so only a shared batch lets both finish quickly.
    let server =
        ServerConfig::local(store.path()).env("CLIPFN_BATCH_SIZE", "6").env("CLIPFN_BATCH_WAIT_MS", "30000").start();
    let (a, b) = (&keys[..3], &keys[3..]);
    let server = &server;
    let (body_a, body_b) = std::thread::scope(|s| {
        let embed = move |keys: &[String]| {
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let (status, body) = server.embed(&keys);
            assert_eq!(status, 200, "{body}");
            body
        };
        let first = s.spawn(move || embed(a));
        let second = s.spawn(move || embed(b));
        (first.join().unwrap(), second.join().unwrap())
    });
    let metrics = scrape(server);
    assert_eq!(series(&metrics, "clipfn_batch_size_photos_count", &[]), 1.0, "one batch for both requests");
    assert_eq!(series(&metrics, "clipfn_batch_size_photos_sum", &[]), 6.0);

    // The same six photos in one request: each must come back identical to its own result above.
    let all: Vec<&str> = keys.iter().map(String::as_str).collect();
    let (status, together) = server.embed(&all);
    assert_eq!(status, 200, "{together}");
    for (i, key) in keys.iter().enumerate() {
        let (body, index) = if i < 3 { (&body_a, i) } else { (&body_b, i - 3) };
        assert_eq!(body["data"][index]["image"], key.as_str());
        let similarity = cosine(&item(body, index).unwrap(), &item(&together, i).unwrap());
        assert!(similarity > 0.99999, "{key}: cosine {similarity} to its result in a single request");
    }
    // And different photos really are told apart, so the check above could fail.
    assert!(cosine(&item(&together, 0).unwrap(), &item(&together, 1).unwrap()) < 0.99);
}
