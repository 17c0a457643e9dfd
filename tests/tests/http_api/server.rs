//! nsqd's HTTP server itself: `/config/:opt`, httprouter's redirects and `OPTIONS`, and the
//! refusal of plain HTTP under `--tls-required`.

use nsq_test_broker::Nsqd;
use nsq_test_broker::conformance::Env;

use crate::R;
use crate::raw::send;

#[test]
fn config_options_read_and_change_like_nsqd() {
    let env = Env::new(|b| b);
    let Some(http) = env.http_or_skip("config_options_read_and_change_like_nsqd") else {
        return;
    };
    let req = |method: &str, target: &str, body: &[u8]| {
        let r = send(http, method, target, body);
        (
            r.status,
            r.text(),
            r.header("content-type").map(str::to_owned),
        )
    };
    let json_type = Some("application/json; charset=utf-8".to_owned());
    let text_type = Some("text/plain; charset=utf-8".to_owned());
    // Numbers and durations (nanoseconds) as JSON, strings as plain text.
    assert_eq!(
        req("GET", "/config/max_rdy_count", b""),
        (200, "2500".to_owned(), json_type.clone())
    );
    assert_eq!(
        req("GET", "/config/msg_timeout", b""),
        (200, "60000000000".to_owned(), json_type.clone())
    );
    assert_eq!(
        req("GET", "/config/snappy", b""),
        (200, "true".to_owned(), json_type.clone())
    );
    assert_eq!(
        req("GET", "/config/log_prefix", b""),
        (200, "[nsqd] ".to_owned(), text_type)
    );
    assert_eq!(
        req("GET", "/config/statsd_address", b""),
        (200, String::new(), None)
    );
    assert_eq!(
        req("GET", "/config/tcp_address", b"").1,
        env.tcp_address().to_string()
    );
    for unknown in [
        "client_timeout",
        "queue_scan_interval",
        "LOG_LEVEL",
        "logger",
    ] {
        assert_eq!(
            req("GET", &format!("/config/{unknown}"), b"").0,
            400,
            "{unknown}"
        );
    }
    // log_level takes a level name, any case.
    assert_eq!(req("PUT", "/config/log_level", b"WARN").1, "3");
    assert_eq!(req("GET", "/config/log_level", b"").1, "3");
    assert_eq!(req("PUT", "/config/log_level", b"info").1, "2");
    assert_eq!(
        req("PUT", "/config/log_level", b"debug\n").1,
        r#"{"message":"INVALID_VALUE"}"#
    );
    // nsqlookupd_tcp_addresses takes a JSON array; null makes it null.
    let before = req("GET", "/config/nsqlookupd_tcp_addresses", b"").1;
    assert_eq!(
        req("PUT", "/config/nsqlookupd_tcp_addresses", b"null").1,
        "null"
    );
    assert_eq!(
        req("PUT", "/config/nsqlookupd_tcp_addresses", b"[1]"),
        (400, r#"{"message":"INVALID_VALUE"}"#.to_owned(), json_type)
    );
    assert_eq!(
        req("PUT", "/config/nsqlookupd_tcp_addresses", before.as_bytes()).1,
        before
    );
    // Only those two can be changed; the body is checked first.
    assert_eq!(req("PUT", "/config/max_rdy_count", b"5").0, 400);
    assert_eq!(req("PUT", "/config/max_rdy_count", b"").0, 413);
}

#[test]
fn routing_redirects_and_options_like_httprouter() {
    let env = Env::new(|b| b);
    let Some(http) = env.http_or_skip("routing_redirects_and_options_like_httprouter") else {
        return;
    };
    let r = send(http, "GET", "/ping/", b"");
    assert_eq!((r.status, r.header("location")), (301, Some("/ping")));
    assert_eq!(r.text(), "<a href=\"/ping\">Moved Permanently</a>.\n\n");
    let r = send(http, "POST", "/Topic/Create?topic=x", b"");
    assert_eq!(
        (r.status, r.header("location"), r.body.len()),
        (307, Some("/topic/create?topic=x"), 0)
    );
    assert_eq!(send(http, "GET", "/p%69ng", b"").text(), "OK");
    let r = send(http, "OPTIONS", "/config/x", b"");
    assert_eq!(
        (r.status, r.header("allow"), r.body.len()),
        (200, Some("GET, OPTIONS, PUT"), 0)
    );
    let r = send(http, "HEAD", "/ping", b"");
    assert_eq!((r.status, r.header("allow")), (405, Some("GET, OPTIONS")));
    assert_eq!(send(http, "GET", "/config/", b"").status, 404);
    // A query that does not parse only matters to handlers that read it.
    assert_eq!(send(http, "GET", "/ping?a=%zz", b"").text(), "OK");
    assert_eq!(
        send(http, "POST", "/topic/create?topic=a;b", b"").text(),
        r#"{"message":"INVALID_REQUEST"}"#
    );
}

#[test]
fn tls_required_refuses_plain_http_like_nsqd() -> R {
    let nsqd = Nsqd::builder().tls_required(true).http(true).start()?;
    let r = send(nsqd.http_address().ok_or("http")?, "GET", "/ping", b"");
    assert_eq!(
        (r.status, r.text()),
        (
            403,
            r#"{"message": "TLS_REQUIRED", "https_port": 0}"#.to_owned()
        )
    );
    Ok(())
}
