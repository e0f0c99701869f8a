//! Tests of the HTTP API through the router (tower `oneshot`), on SQLite in a temporary directory.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::{AppState, router};
use reel_queue::JobQueue;
use reel_queue::config::LoadedConfig;

struct Fixture {
    state: AppState,
    /// An admin token with root `/` (the fixture protects none of reel's paths).
    admin: String,
    _dir: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    fixture_with(|_| {}).await
}

async fn fixture_with(edit: impl FnOnce(&mut reel_queue::config::Config)) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let mut loaded = LoadedConfig::load_with(None, Some(dir.path()), &Default::default()).unwrap();
    edit(&mut loaded.config);
    let queue = JobQueue::open(&loaded.config).await.unwrap();
    let catalogue = reel_engine::catalogue::Catalogue::open(&loaded.config.store.url)
        .await
        .unwrap();
    let state = AppState::new(loaded.config, queue, catalogue, None, Vec::new()).unwrap();
    let admin = token(&state, "admin", "/").await;
    Fixture {
        state,
        admin,
        _dir: dir,
    }
}

/// A new token with these scopes and one root.
async fn token(state: &AppState, scopes: &str, root: &str) -> String {
    state
        .tokens()
        .create(
            scopes,
            reel_queue::token::parse_scopes(scopes).unwrap(),
            vec![root.into()],
            vec![String::new()],
            50,
        )
        .await
        .unwrap()
        .bearer
}

/// A new `submit` token named `name`, rooted at `/`, for keys under `prefix` only, with this
/// highest priority.
async fn prefixed_token(state: &AppState, name: &str, prefix: &str, max_priority: i32) -> String {
    state
        .tokens()
        .create(
            name,
            reel_queue::token::parse_scopes("submit").unwrap(),
            vec!["/".into()],
            vec![prefix.into()],
            max_priority,
        )
        .await
        .unwrap()
        .bearer
}

/// One request as the fixture's admin; returns the status and the body (JSON when it parses,
/// else a JSON string).
async fn call(f: &Fixture, method: Method, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
    call_as(&f.state, Some(&f.admin), method, uri, body).await
}

/// A POST with `token` and a JSON body.
async fn post(state: &AppState, token: &str, uri: &str, body: Value) -> (StatusCode, Value) {
    call_as(state, Some(token), Method::POST, uri, Some(body)).await
}

/// One request with `token` (or none).
async fn call_as(
    state: &AppState,
    token: Option<&str>,
    method: Method,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .header("host", "localhost:8420");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = match body {
        Some(b) => req
            .header("content-type", "application/json")
            .body(Body::from(b.to_string())),
        None => req.body(Body::empty()),
    }
    .unwrap();
    let resp = router(state.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 16 << 20)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn assert_error(status: StatusCode, body: &Value, want: StatusCode, needle: &str) {
    assert_eq!(status, want, "{body}");
    assert_eq!(body["status"], want.as_u16(), "{body}");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(error.contains(needle), "error {error:?} lacks {needle:?}");
    assert!(
        !body["hint"].as_str().unwrap_or_default().is_empty(),
        "no hint in {body}"
    );
}

#[tokio::test]
async fn api_submit_list_show_cancel_retry() {
    let f = fixture().await;
    let s = &f;
    let (st, job) = call(
        s,
        Method::POST,
        "/v1/jobs/intake",
        Some(json!({"barcodes": ["A00001", "A00002"], "priority": 70})),
    )
    .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{job}");
    assert_eq!(job["kind"], "intake");
    assert_eq!(job["state"], "queued");
    assert_eq!(job["priority"], 70);
    assert_eq!(
        job["spec"]["selection"]["barcodes"],
        json!(["A00001", "A00002"])
    );
    let id = job["id"].as_str().unwrap().to_string();

    // A second job, of another kind, through the same spec builder as the CLI.
    let (st, v) = call(
        s,
        Method::POST,
        "/v1/jobs/verify",
        Some(json!({"sample_every": 5})),
    )
    .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    assert_eq!(v["priority"], 10, "verify defaults to background priority");

    let (st, list) = call(s, Method::GET, "/v1/jobs", None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(list["jobs"].as_array().unwrap().len(), 2, "{list}");
    let (_, list) = call(s, Method::GET, "/v1/jobs?state=queued&limit=1", None).await;
    assert_eq!(list["jobs"].as_array().unwrap().len(), 1, "{list}");
    let (_, list) = call(s, Method::GET, "/v1/jobs?state=done", None).await;
    assert_eq!(list, json!({"jobs": []}));

    let (st, shown) = call(s, Method::GET, &format!("/v1/jobs/{id}"), None).await;
    assert_eq!(st, StatusCode::OK, "{shown}");
    assert_eq!(shown["id"], id.as_str());
    assert_eq!(shown["progress"]["objects_done"], 0);
    assert_eq!(shown["requests"]["total"], 0);

    let (st, v) = call(s, Method::POST, &format!("/v1/jobs/{id}/cancel"), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["state"], "cancelled");
    let (st, v) = call(s, Method::POST, &format!("/v1/jobs/{id}/cancel"), None).await;
    assert_error(st, &v, StatusCode::CONFLICT, "cancelled");
    let (_, list) = call(s, Method::GET, "/v1/jobs?state=cancelled", None).await;
    assert_eq!(list["jobs"].as_array().unwrap().len(), 1, "{list}");

    let (st, v) = call(s, Method::POST, &format!("/v1/jobs/{id}/retry"), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["state"], "queued");
    assert_eq!(v["cancel_requested"], false);
    let (st, v) = call(s, Method::POST, &format!("/v1/jobs/{id}/retry"), None).await;
    assert_error(st, &v, StatusCode::CONFLICT, "queued");
}

/// Catalogue one durable object `key` on cartridge `barcode`; returns its container id.
async fn seed(state: &AppState, barcode: &str, key: &str) -> i64 {
    use reel_engine::catalogue::{
        ContainerState, FIRST_CONTAINER_FILE, LABELLED_EOD_BLOCK, NewCopy,
    };
    let cat = state.catalogue();
    cat.ensure_pool("p1").await.unwrap();
    cat.add_cartridge(barcode, false, 1 << 40).await.unwrap();
    cat.set_labelled(barcode, "p1", uuid::Uuid::new_v4(), 1)
        .await
        .unwrap();
    let id = cat
        .create_container(
            uuid::Uuid::new_v4(),
            barcode,
            FIRST_CONTAINER_FILE,
            LABELLED_EOD_BLOCK,
            1 << 20,
        )
        .await
        .unwrap();
    let copy = NewCopy {
        key: key.into(),
        generation: 1,
        size: 1,
        sha256: [7; 32],
        offset: 0,
        length: 1,
        meta: None,
    };
    cat.close_container(id, LABELLED_EOD_BLOCK + 2, 1, [9; 32], &[copy])
        .await
        .unwrap();
    cat.set_container_state(&[id], ContainerState::Durable)
        .await
        .unwrap();
    id
}

#[tokio::test]
async fn api_archive_and_recall_specs_match_the_cli() {
    let f = fixture().await;
    let s = &f;
    seed(&s.state, "S00001", "x/a.txt").await;
    let tree = tempfile::tempdir().unwrap();
    std::fs::write(tree.path().join("a.txt"), b"a").unwrap();
    let (st, v) = call(
        s,
        Method::POST,
        "/v1/jobs/archive",
        Some(json!({"paths": [tree.path()], "key_prefix": "x/"})),
    )
    .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    let want = reel_queue::job::JobSpec::Archive(reel_queue::job::ArchiveJob {
        source: reel_queue::job::ArchiveSource::Tree(tree.path().to_path_buf()),
        key_prefix: "x/".into(),
        storage_class: reel_queue::config::Config::default().archive.default_class,
        confine: None,
    });
    // The same spec, confined to the token's root the paths lie in.
    let mut want = serde_json::to_value(&want).unwrap();
    want["confine"] = json!("/");
    assert_eq!(v["spec"], want);

    let (st, v) = call(
        s,
        Method::POST,
        "/v1/jobs/recall",
        Some(json!({"prefix": "x/", "to": "/restore"})),
    )
    .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    assert_eq!(v["spec"]["selection"], json!({"prefix": "x/"}));
    assert_eq!(v["spec"]["destination"], "/restore");
    assert_eq!(v["spec"]["confine"], "/");
}

#[tokio::test]
async fn api_bad_input_is_400_and_unknown_is_404() {
    let f = fixture().await;
    let s = &f;
    let cases = [
        (
            "/v1/jobs/archive",
            json!({"paths": ["rel/dir"]}),
            "not absolute",
        ),
        ("/v1/jobs/archive", json!({"paths": []}), "empty"),
        (
            "/v1/jobs/archive",
            json!({"paths": ["/no/such/path/anywhere"]}),
            "/no/such/path/anywhere",
        ),
        (
            "/v1/jobs/archive",
            json!({"paths": ["/"], "class": "gold"}),
            "gold",
        ),
        ("/v1/jobs/archive", json!({"path": ["/"]}), "unknown field"),
        (
            "/v1/jobs/recall",
            json!({"keys": ["a"], "prefix": "b", "to": "/o"}),
            "not both",
        ),
        (
            "/v1/jobs/recall",
            json!({"keys": [], "to": "/o"}),
            "at least one key",
        ),
        (
            "/v1/jobs/recall",
            json!({"keys": ["a"], "to": "/o", "overwrite": "sometimes"}),
            "if-newer",
        ),
        ("/v1/jobs/verify", json!({}), "exactly one"),
        (
            "/v1/jobs/verify",
            json!({"cartridge": "A", "container": 1}),
            "exactly one",
        ),
        ("/v1/jobs/intake", json!({}), "at least one barcode"),
    ];
    for (uri, body, needle) in cases {
        let (st, v) = call(s, Method::POST, uri, Some(body.clone())).await;
        assert_error(st, &v, StatusCode::BAD_REQUEST, needle);
        // An HTTP client is told the body's field names, never the command line's flags.
        assert!(!v.to_string().contains("--"), "{uri} {body}: {v}");
    }
    let (st, v) = call(
        s,
        Method::POST,
        "/v1/jobs/verify",
        Some(json!({"cartridge": "A", "sample_every": 3})),
    )
    .await;
    assert_error(st, &v, StatusCode::BAD_REQUEST, "exactly one");
    assert!(v.to_string().contains("`sample_every`"), "{v}");
    let (st, v) = call(
        s,
        Method::POST,
        "/v1/jobs/intake",
        Some(json!({"barcodes": ["A"], "all_new": true})),
    )
    .await;
    assert_error(st, &v, StatusCode::BAD_REQUEST, "`all_new`");
    // Not JSON at all.
    let req = Request::builder()
        .method(Method::POST)
        .uri("/v1/jobs/intake")
        .header("host", "localhost")
        .header("authorization", format!("Bearer {}", s.admin))
        .header("content-type", "application/json")
        .body(Body::from("{nope"))
        .unwrap();
    let resp = router(s.state.clone()).oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);

    let (st, v) = call(s, Method::GET, "/v1/jobs?state=bogus", None).await;
    assert_error(st, &v, StatusCode::BAD_REQUEST, "bogus");
    let (st, v) = call(s, Method::GET, "/v1/jobs?limit=0", None).await;
    assert_error(st, &v, StatusCode::BAD_REQUEST, "limit");
    let (st, v) = call(s, Method::GET, "/v1/jobs?limit=many", None).await;
    assert_error(st, &v, StatusCode::BAD_REQUEST, "query");

    let (st, v) = call(s, Method::GET, "/v1/jobs/nope", None).await;
    assert_error(st, &v, StatusCode::NOT_FOUND, "nope");
    assert!(v["hint"].as_str().unwrap().contains("GET /v1/jobs"), "{v}");
    let (st, v) = call(s, Method::POST, "/v1/jobs/nope/cancel", None).await;
    assert_error(st, &v, StatusCode::NOT_FOUND, "nope");
    let (st, v) = call(s, Method::POST, "/v1/jobs/nope/retry", None).await;
    assert_error(st, &v, StatusCode::NOT_FOUND, "nope");
    let (st, v) = call(s, Method::GET, "/v1/catalog/objects/a/b.txt", None).await;
    assert_error(st, &v, StatusCode::NOT_FOUND, "`a/b.txt`");
    let (st, v) = call(s, Method::GET, "/v1/nothing/here", None).await;
    assert_error(st, &v, StatusCode::NOT_FOUND, "/v1/nothing/here");

    let (st, v) = call(s, Method::GET, "/v1/catalog/objects?prefix=a/", None).await;
    assert_eq!((st, v), (StatusCode::OK, json!([])));
    let (st, v) = call(s, Method::GET, "/healthz", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["store"], "sqlite");
}

/// What the submission checks refuse is a 400 naming the field and the value, and nothing is
/// queued.
#[tokio::test]
async fn api_refuses_bad_submissions_naming_the_value() {
    let f = fixture().await;
    let s = &f;
    let id = seed(&s.state, "S00001", "kept/a.txt").await;
    let src = tempfile::tempdir().unwrap();
    let (ax, bx) = (src.path().join("a/x"), src.path().join("b/x"));
    for p in [&ax, &bx] {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"x").unwrap();
    }
    let fifo = src.path().join("pipe");
    let st = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(st.success());

    let (st, v) = call(
        s,
        Method::POST,
        "/v1/jobs/archive",
        Some(json!({"paths": [ax, bx], "key_prefix": "k/"})),
    )
    .await;
    assert_error(st, &v, StatusCode::BAD_REQUEST, "`paths`");
    for needle in [ax.to_str().unwrap(), bx.to_str().unwrap(), "`k/x`"] {
        assert!(
            v["error"].as_str().unwrap().contains(needle),
            "{needle}: {v}"
        );
    }
    let (st, v) = call(
        s,
        Method::POST,
        "/v1/jobs/archive",
        Some(json!({"paths": [fifo]})),
    )
    .await;
    assert_error(st, &v, StatusCode::BAD_REQUEST, "FIFO");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains(fifo.to_str().unwrap()),
        "{v}"
    );
    let (st, v) = call(
        s,
        Method::POST,
        "/v1/jobs/archive",
        Some(json!({"paths": [ax], "key_prefix": "../"})),
    )
    .await;
    assert_error(st, &v, StatusCode::BAD_REQUEST, "`key_prefix`");

    let (st, v) = call(
        s,
        Method::POST,
        "/v1/jobs/recall",
        Some(json!({"keys": ["kept/a.txt", "no/such/key"], "to": "/restore"})),
    )
    .await;
    assert_error(st, &v, StatusCode::BAD_REQUEST, "`no/such/key`");
    assert!(!v["error"].as_str().unwrap().contains("kept/a.txt"), "{v}");
    let (st, v) = call(
        s,
        Method::POST,
        "/v1/jobs/recall",
        Some(json!({"keys": ["kept/a.txt", "kept/a.txt"], "to": "/restore"})),
    )
    .await;
    assert_error(st, &v, StatusCode::BAD_REQUEST, "listed twice");
    let (st, v) = call(
        s,
        Method::POST,
        "/v1/jobs/recall",
        Some(json!({"prefix": "nothing/", "to": "/restore"})),
    )
    .await;
    assert_error(st, &v, StatusCode::BAD_REQUEST, "`nothing/`");

    let (st, v) = call(
        s,
        Method::POST,
        "/v1/jobs/verify",
        Some(json!({"container": -1})),
    )
    .await;
    assert_error(st, &v, StatusCode::BAD_REQUEST, "-1");
    assert!(v["error"].as_str().unwrap().contains("`container`"), "{v}");
    let (st, v) = call(
        s,
        Method::POST,
        "/v1/jobs/verify",
        Some(json!({"cartridge": "NOPE01"})),
    )
    .await;
    assert_error(st, &v, StatusCode::BAD_REQUEST, "NOPE01");
    let (st, v) = call(
        s,
        Method::POST,
        "/v1/jobs/intake",
        Some(json!({"barcodes": ["A00001", "A00001"]})),
    )
    .await;
    assert_error(st, &v, StatusCode::BAD_REQUEST, "A00001");
    let (_, list) = call(s, Method::GET, "/v1/jobs", None).await;
    assert_eq!(list, json!({"jobs": []}), "nothing was queued");

    // What the catalogue knows is accepted.
    for (uri, body) in [
        ("/v1/jobs/verify", json!({"container": id})),
        ("/v1/jobs/verify", json!({"cartridge": "S00001"})),
        (
            "/v1/jobs/recall",
            json!({"keys": ["kept/a.txt"], "to": "/restore"}),
        ),
    ] {
        let (st, v) = call(s, Method::POST, uri, Some(body)).await;
        assert_eq!(st, StatusCode::ACCEPTED, "{uri}: {v}");
    }
}

#[tokio::test]
async fn api_store_down_is_503() {
    let f = fixture().await;
    let s = &f;
    // A client that has been calling: its token passes while the store is down (for a
    // minute), so it sees the outage rather than a 401.
    let (st, _) = call(s, Method::GET, "/v1/jobs", None).await;
    assert_eq!(st, StatusCode::OK);
    match s.state.queue().store().db() {
        reel_queue::db::Db::Sqlite(p) => p.close().await,
        reel_queue::db::Db::Postgres(p) => p.close().await,
    }
    let (st, v) = call(s, Method::GET, "/v1/jobs", None).await;
    assert_error(st, &v, StatusCode::SERVICE_UNAVAILABLE, "job store");
    let (st, v) = call(s, Method::GET, "/healthz", None).await;
    assert_error(st, &v, StatusCode::SERVICE_UNAVAILABLE, "job store");
    let (st, v) = call(
        s,
        Method::POST,
        "/v1/jobs/intake",
        Some(json!({"all_new": true})),
    )
    .await;
    assert_error(st, &v, StatusCode::SERVICE_UNAVAILABLE, "");
    let (st, v) = call(s, Method::GET, "/metrics", None).await;
    assert_eq!(st, StatusCode::OK);
    assert!(v.as_str().unwrap().contains("reel_store_up 0"), "{v}");
}

#[tokio::test]
async fn api_openapi_names_every_route() {
    let f = fixture().await;
    let (st, doc) = call(&f, Method::GET, "/openapi.json", None).await;
    assert_eq!(st, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."), "{doc}");
    let paths = doc["paths"].as_object().unwrap();
    let want = [
        ("/v1/jobs/archive", "post"),
        ("/v1/jobs/recall", "post"),
        ("/v1/jobs/verify", "post"),
        ("/v1/jobs/intake", "post"),
        ("/v1/jobs/delete", "post"),
        ("/v1/catalog/undelete", "post"),
        ("/v1/catalog/recycle", "get"),
        ("/v1/holds", "get"),
        ("/v1/holds", "post"),
        ("/v1/holds/{id}/release", "post"),
        ("/v1/jobs/repack", "post"),
        ("/v1/repack/dry-run", "post"),
        ("/v1/repack/policy", "get"),
        ("/v1/jobs/reclaim", "post"),
        ("/v1/reclaim", "get"),
        ("/v1/jobs", "get"),
        ("/v1/jobs/{id}", "get"),
        ("/v1/jobs/{id}/cancel", "post"),
        ("/v1/jobs/{id}/retry", "post"),
        ("/v1/jobs/{id}/drop-failures", "post"),
        ("/v1/failed-requests", "get"),
        ("/v1/queues", "get"),
        ("/v1/catalog/objects", "get"),
        ("/v1/catalog/objects/{key}", "get"),
        ("/v1/objects/{key}", "get"),
        ("/v1/objects/{key}", "put"),
        ("/v1/stage/{key}", "post"),
        ("/v1/library", "get"),
        ("/v1/cartridges", "get"),
        ("/v1/cartridges/{barcode}", "get"),
        ("/v1/cartridges/{barcode}/state", "post"),
        ("/v1/drives", "get"),
        ("/v1/drives/{drive}", "get"),
        ("/v1/drives/{drive}/down", "post"),
        ("/v1/drives/{drive}/up", "post"),
        ("/v1/drives/{drive}/reset", "post"),
        ("/v1/drives/{drive}/reset", "get"),
        ("/v1/drives/{drive}/clean", "post"),
        ("/v1/drives/{drive}/clean", "get"),
        ("/v1/cleaning-cartridges", "get"),
        ("/v1/vault", "get"),
        ("/v1/vault/wanted", "get"),
        ("/v1/vault/export", "post"),
        ("/v1/vault/import", "post"),
        ("/v1/vault/imports/{id}", "get"),
        ("/healthz", "get"),
        ("/metrics", "get"),
        ("/openapi.json", "get"),
    ];
    for (path, method) in want {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{method} {path} missing from the OpenAPI document"
        );
    }
    let distinct: std::collections::BTreeSet<_> = want.iter().map(|(p, _)| *p).collect();
    assert_eq!(
        paths.len(),
        distinct.len(),
        "routes not in the test: {:?}",
        paths.keys()
    );
    // Every route the document names answers (not the router's 404 fallback).
    for (path, method) in want {
        let uri = path
            .replace("{id}", "x")
            .replace("{key}", "k")
            .replace("{drive}", "d-0")
            .replace("{barcode}", "B00001L9");
        let m = match method {
            "get" => Method::GET,
            "put" => Method::PUT,
            _ => Method::POST,
        };
        let (_, v) = call(&f, m, &uri, Some(json!({}))).await;
        assert!(
            !v["error"]
                .as_str()
                .unwrap_or_default()
                .starts_with("no route"),
            "{method} {path}: {v}"
        );
    }
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for s in ["ArchiveRequest", "JobView", "ErrorBody", "ObjectCopies"] {
        assert!(schemas.contains_key(s), "schema {s} missing");
    }
}

#[tokio::test]
async fn api_metrics_has_job_gauges_and_http_counts() {
    let f = fixture().await;
    let s = &f;
    for _ in 0..3 {
        let (st, _) = call(
            s,
            Method::POST,
            "/v1/jobs/intake",
            Some(json!({"all_new": true})),
        )
        .await;
        assert_eq!(st, StatusCode::ACCEPTED);
    }
    let (_, _) = call(s, Method::GET, "/v1/jobs/unknown", None).await;
    let (st, v) = call(s, Method::GET, "/metrics", None).await;
    assert_eq!(st, StatusCode::OK);
    let text = v.as_str().unwrap();
    let has = |line: &str| text.lines().any(|l| l == line);
    // Label order in the exposition follows the order they were given.
    assert!(
        has(r#"reel_jobs{kind="intake",state="queued"} 3"#),
        "{text}"
    );
    assert!(
        has(r#"reel_jobs{kind="archive",state="queued"} 0"#),
        "{text}"
    );
    assert!(has("reel_store_up 1"), "{text}");
    assert!(
        has(r#"reel_http_requests_total{route="/v1/jobs/intake",method="POST",status="202"} 3"#),
        "{text}"
    );
    assert!(
        has(r#"reel_http_requests_total{route="/v1/jobs/{id}",method="GET",status="404"} 1"#),
        "{text}"
    );
    assert!(text.contains("# TYPE reel_jobs gauge"), "{text}");
}

/// `/healthz` probes a write: a write lock held by another process (a `sqlite3` shell left in
/// a transaction) is a 503 naming the store's file within the probe's timeout, not a 200 (reads
/// still work) nor a 30 s hang; once the lock is gone it is 200 again.
#[tokio::test]
async fn healthz_is_503_naming_the_file_while_the_store_cannot_take_a_write() {
    use sqlx::ConnectOptions;
    use std::str::FromStr;
    let f = fixture().await;
    let s = &f;
    let file = s.state.queue().store().db().location();
    let mut other = sqlx::sqlite::SqliteConnectOptions::from_str(&format!("sqlite:{file}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .unwrap();
    let t0 = std::time::Instant::now();
    let (st, v) = call(s, Method::GET, "/healthz", None).await;
    assert!(t0.elapsed() < std::time::Duration::from_secs(10), "{v}");
    assert_error(st, &v, StatusCode::SERVICE_UNAVAILABLE, &file);
    assert!(v["error"].as_str().unwrap().contains("write lock"), "{v}");
    // Without a token: the fault, not where the database is.
    let (st, v) = call_as(&s.state, None, Method::GET, "/healthz", None).await;
    assert_error(
        st,
        &v,
        StatusCode::SERVICE_UNAVAILABLE,
        "cannot take a write",
    );
    assert!(!v.to_string().contains(&file), "{v}");
    // Reads still answer meanwhile.
    let (st, _) = call(s, Method::GET, "/v1/jobs", None).await;
    assert_eq!(st, StatusCode::OK);
    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
    let (st, v) = call(s, Method::GET, "/healthz", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
}

/// Send raw header lines (besides Host) as the admin, for the limit tests.
async fn raw(f: &Fixture, host: &str, extra: &[(&str, String)], body: Body) -> (StatusCode, Value) {
    let mut req = Request::builder()
        .method(Method::POST)
        .uri("/v1/jobs/intake")
        .header("host", host)
        .header("authorization", format!("Bearer {}", f.admin))
        .header("content-type", "application/json");
    for (k, v) in extra {
        req = req.header(*k, v.as_str());
    }
    let resp = router(f.state.clone())
        .oneshot(req.body(body).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Missing, malformed, wrong and revoked tokens are one 401 with `WWW-Authenticate`; a token
/// without the scope is 403 naming the scope; /healthz and /openapi.json stay open.
#[tokio::test]
async fn tokens_authenticate_and_scopes_authorise() {
    let f = fixture().await;
    let st = &f.state;
    let reader = token(st, "read", "/").await;
    let mut wrong = reader.clone();
    let last = wrong.pop().unwrap();
    wrong.push(if last == 'a' { 'b' } else { 'a' });
    let revoked = token(st, "read", "/").await;
    st.tokens().revoke(&revoked).await.unwrap();
    for (who, t) in [
        ("none", None),
        ("garbage", Some("nonsense")),
        ("wrong secret", Some(wrong.as_str())),
        ("revoked", Some(revoked.as_str())),
    ] {
        for (m, uri) in [
            (Method::GET, "/v1/jobs"),
            (Method::GET, "/metrics"),
            (Method::GET, "/v1/catalog/objects"),
            (Method::POST, "/v1/jobs/intake"),
            (Method::GET, "/v1/no/such/route"),
        ] {
            let (code, v) = call_as(st, t, m, uri, Some(json!({"all_new": true}))).await;
            assert_error(code, &v, StatusCode::UNAUTHORIZED, "needs an API token");
            assert!(!v.to_string().contains("revoked\""), "{who}: {v}");
        }
    }
    let req = Request::builder()
        .uri("/v1/jobs")
        .header("host", "localhost")
        .body(Body::empty())
        .unwrap();
    let resp = router(st.clone()).oneshot(req).await.unwrap();
    assert_eq!(
        resp.headers().get("www-authenticate").unwrap(),
        r#"Bearer realm="reel""#
    );
    for open in ["/healthz", "/openapi.json"] {
        let (code, _) = call_as(st, None, Method::GET, open, None).await;
        assert_eq!(code, StatusCode::OK, "{open}");
    }
    // A reader reads, and may not submit, take cartridges in, cancel or retry.
    let (code, _) = call_as(st, Some(&reader), Method::GET, "/v1/jobs", None).await;
    assert_eq!(code, StatusCode::OK);
    let (code, v) = post(
        st,
        &reader,
        "/v1/jobs/recall",
        json!({"prefix": "x/", "to": "/tmp/r"}),
    )
    .await;
    assert_error(code, &v, StatusCode::FORBIDDEN, "`submit` scope");
    let (code, v) = post(st, &reader, "/v1/jobs/intake", json!({"all_new": true})).await;
    assert_error(code, &v, StatusCode::FORBIDDEN, "`operate` scope");
    // A submitter may not read the catalogue or the metrics.
    let submitter = token(st, "submit", "/").await;
    for uri in ["/v1/catalog/objects", "/metrics"] {
        let (code, v) = call_as(st, Some(&submitter), Method::GET, uri, None).await;
        assert_error(code, &v, StatusCode::FORBIDDEN, "`read` scope");
    }
}

/// A `submit` token sees, cancels and retries only its own jobs (another's is "no such job"),
/// may not raise its priority past its maximum, and its jobs record it; `operate` acts on all.
#[tokio::test]
async fn a_submit_token_owns_its_jobs_only() {
    let f = fixture().await;
    let st = &f.state;
    seed(st, "S00001", "x/a.txt").await;
    let (alice, bob) = (
        token(st, "submit", "/").await,
        token(st, "submit", "/").await,
    );
    let operator = token(st, "operate", "/").await;
    let recall = json!({"prefix": "x/", "to": "/tmp/reel-api-owner"});
    let (code, job) = post(st, &alice, "/v1/jobs/recall", recall.clone()).await;
    assert_eq!(code, StatusCode::ACCEPTED, "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    let alice_id = reel_queue::token::split_bearer(&alice).unwrap().0;
    assert_eq!(job["token"], alice_id);
    let (code, _) = post(st, &bob, "/v1/jobs/recall", recall.clone()).await;
    assert_eq!(code, StatusCode::ACCEPTED);
    // Each sees one job: its own.
    for t in [&alice, &bob] {
        let (_, list) = call_as(st, Some(t), Method::GET, "/v1/jobs", None).await;
        assert_eq!(list["jobs"].as_array().unwrap().len(), 1, "{list}");
    }
    let (_, list) = call_as(st, Some(&operator), Method::GET, "/v1/jobs", None).await;
    assert_eq!(list["jobs"].as_array().unwrap().len(), 2, "{list}");
    // Bob cannot see, cancel or retry Alice's job: it does not exist for him.
    for (m, uri) in [
        (Method::GET, format!("/v1/jobs/{id}")),
        (Method::POST, format!("/v1/jobs/{id}/cancel")),
        (Method::POST, format!("/v1/jobs/{id}/retry")),
    ] {
        let (code, v) = call_as(st, Some(&bob), m, &uri, None).await;
        assert_error(code, &v, StatusCode::NOT_FOUND, "no job");
    }
    // Alice cancels her own, the operator retries it.
    let (code, v) = call_as(
        st,
        Some(&alice),
        Method::POST,
        &format!("/v1/jobs/{id}/cancel"),
        None,
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{v}");
    let (code, v) = call_as(
        st,
        Some(&operator),
        Method::POST,
        &format!("/v1/jobs/{id}/retry"),
        None,
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{v}");
    // Priority: up to the token's maximum (50), any for operate.
    let mut urgent = recall.clone();
    urgent["priority"] = json!(90);
    let (code, v) = post(st, &alice, "/v1/jobs/recall", urgent.clone()).await;
    assert_error(
        code,
        &v,
        StatusCode::FORBIDDEN,
        "above this token's maximum",
    );
    let (code, v) = post(st, &operator, "/v1/jobs/recall", urgent).await;
    assert_eq!(
        code,
        StatusCode::FORBIDDEN,
        "operate alone does not submit: {v}"
    );
}

/// Paths outside the token's roots are refused alike whether they exist or not; a link on the
/// way is refused; reel's own paths are refused even inside a root.
#[tokio::test]
async fn paths_are_confined_to_the_tokens_roots() {
    let f = fixture().await;
    let st = &f.state;
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    std::fs::create_dir_all(root.join("in")).unwrap();
    std::fs::write(root.join("in/f"), b"f").unwrap();
    std::fs::write(base.path().join("secret"), b"s").unwrap();
    std::os::unix::fs::symlink(base.path(), root.join("up")).unwrap();
    let t = token(st, "submit", root.to_str().unwrap()).await;
    let archive = |p: std::path::PathBuf| json!({"paths": [p]});
    let (code, v) = post(st, &t, "/v1/jobs/archive", archive(root.join("in/f"))).await;
    assert_eq!(code, StatusCode::ACCEPTED, "{v}");
    assert_eq!(v["spec"]["confine"], root.to_str().unwrap());
    let (c1, v1) = post(
        st,
        &t,
        "/v1/jobs/archive",
        archive(base.path().join("secret")),
    )
    .await;
    let (c2, v2) = post(
        st,
        &t,
        "/v1/jobs/archive",
        archive(base.path().join("nothing")),
    )
    .await;
    assert_error(c1, &v1, StatusCode::FORBIDDEN, "outside this token's roots");
    assert_error(c2, &v2, StatusCode::FORBIDDEN, "outside this token's roots");
    let (code, v) = post(st, &t, "/v1/jobs/archive", archive(root.join("up/secret"))).await;
    assert_error(code, &v, StatusCode::BAD_REQUEST, "symbolic link");
    let (code, v) = post(
        st,
        &t,
        "/v1/jobs/archive",
        archive(root.join("in/../../secret")),
    )
    .await;
    assert_error(code, &v, StatusCode::FORBIDDEN, "outside");
    for to in ["/", "/etc", "/tmp/../etc"] {
        let (code, v) = post(st, &t, "/v1/jobs/recall", json!({"keys": ["k"], "to": to})).await;
        assert_error(code, &v, StatusCode::FORBIDDEN, "outside");
    }
    let (code, v) = post(
        st,
        &t,
        "/v1/jobs/recall",
        json!({"keys": ["k"], "to": root.join("up/x")}),
    )
    .await;
    assert_error(code, &v, StatusCode::BAD_REQUEST, "symbolic link");
    // reel's own paths inside a root.
    let own = AppState::new(
        st.config().clone(),
        st.queue().clone(),
        st.catalogue().clone(),
        None,
        vec![root.join("in")],
    )
    .unwrap();
    let (code, v) = post(&own, &t, "/v1/jobs/archive", archive(root.join("in/f"))).await;
    assert_error(code, &v, StatusCode::FORBIDDEN, "reel's own");
    // A token without roots names no paths.
    let rootless = st
        .tokens()
        .create(
            "x",
            reel_queue::token::parse_scopes("submit").unwrap(),
            vec![],
            vec![String::new()],
            50,
        )
        .await
        .unwrap()
        .bearer;
    let (code, v) = post(
        st,
        &rootless,
        "/v1/jobs/archive",
        archive(root.join("in/f")),
    )
    .await;
    assert_error(code, &v, StatusCode::FORBIDDEN, "no roots");
}

/// A foreign or missing Host, oversized headers and bodies, and a token past its rate are
/// refused with JSON bodies.
#[tokio::test]
async fn host_size_and_rate_limits_answer_with_json() {
    let f = fixture_with(|c| {
        c.serve.rate_per_second = 1;
        c.serve.rate_burst = 3;
        c.serve.max_body_bytes = 4096;
    })
    .await;
    let (code, v) = raw(&f, "evil.example", &[], Body::from("{}")).await;
    assert_error(code, &v, StatusCode::BAD_REQUEST, "evil.example");
    let (code, v) = raw(
        &f,
        "localhost",
        &[("x-big", "a".repeat(20_000))],
        Body::from("{}"),
    )
    .await;
    assert_error(
        code,
        &v,
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "headers",
    );
    let big = json!({"barcodes": vec!["A00001"; 2000]}).to_string();
    let (code, v) = raw(&f, "localhost", &[], Body::from(big)).await;
    assert_error(code, &v, StatusCode::PAYLOAD_TOO_LARGE, "max_body_bytes");
    // The body refused above was the token's first request of its burst of three (a foreign
    // Host and oversized headers are refused before the token is looked at); two more pass,
    // the fourth is over the rate.
    let get = || {
        Request::builder()
            .uri("/v1/jobs")
            .header("host", "127.0.0.1:8420")
            .header("authorization", format!("Bearer {}", f.admin))
            .body(Body::empty())
            .unwrap()
    };
    for _ in 0..2 {
        let resp = router(f.state.clone()).oneshot(get()).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }
    let resp = router(f.state.clone()).oneshot(get()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(resp.headers().get("retry-after").unwrap(), "1");
}

/// Job lists page with a cursor and a job's view cuts long lists (a recall of 5 000 keys shows
/// 20 and the count).
#[tokio::test]
async fn job_lists_page_and_views_stay_small() {
    let f = fixture().await;
    for _ in 0..5 {
        let (code, _) = call(
            &f,
            Method::POST,
            "/v1/jobs/intake",
            Some(json!({"all_new": true})),
        )
        .await;
        assert_eq!(code, StatusCode::ACCEPTED);
    }
    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let (code, page) = call(
            &f,
            Method::GET,
            &format!("/v1/jobs?limit=2&cursor={cursor}"),
            None,
        )
        .await;
        assert_eq!(code, StatusCode::OK, "{page}");
        seen.extend(
            page["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["id"].clone()),
        );
        match page["next_cursor"].as_str() {
            Some(c) => cursor = c.to_string(),
            None => break,
        }
    }
    assert_eq!(seen.len(), 5, "{seen:?}");
    let mut unique = seen.clone();
    unique.sort_by_key(|v| v.to_string());
    unique.dedup();
    assert_eq!(unique.len(), 5);
    let (code, v) = call(&f, Method::GET, "/v1/jobs?cursor=bogus", None).await;
    assert_error(code, &v, StatusCode::BAD_REQUEST, "cursor");
    let (code, v) = call(&f, Method::GET, "/v1/jobs?limit=1000", None).await;
    assert_error(code, &v, StatusCode::BAD_REQUEST, "limit");

    // A view of a job with 5 000 keys.
    let keys: Vec<String> = (0..5000).map(|i| format!("k/{i}")).collect();
    let spec = reel_queue::job::JobSpec::Recall(reel_queue::job::RecallJob {
        selection: reel_queue::job::RecallSelection::Keys(keys),
        destination: "/r".into(),
        overwrite: Default::default(),
        confine: None,
    });
    let rec = f.state.queue().store().insert(&spec, 50, 3).await.unwrap();
    let (_, v) = call(&f, Method::GET, &format!("/v1/jobs/{}", rec.id), None).await;
    let text = v.to_string();
    assert!(text.len() < 4096, "{} bytes", text.len());
    assert!(text.contains(r#""keys_total":5000"#), "{text}");
}

/// A token's jobs archive and recall only keys under its key prefixes, and a token without
/// `operate` gets at most its maximum priority also when it asks for none.
#[tokio::test]
async fn key_prefixes_and_priority_bound_a_token() {
    let f = fixture().await;
    let st = &f.state;
    seed(st, "S00001", "a/x").await;
    seed(st, "S00002", "b/x").await;
    let t = prefixed_token(st, "a", "a/", 10).await;
    let to = "/tmp/reel-api-prefix";
    for body in [
        json!({"keys": ["b/x"], "to": to}),
        json!({"keys": ["a/x", "b/x"], "to": to}),
        json!({"prefix": "", "to": to}),
        json!({"prefix": "b/", "to": to}),
    ] {
        let (code, v) = post(st, &t, "/v1/jobs/recall", body.clone()).await;
        assert_error(code, &v, StatusCode::FORBIDDEN, "key prefixes");
    }
    let (code, v) = post(
        st,
        &t,
        "/v1/jobs/archive",
        json!({"paths": ["/tmp"], "key_prefix": "b/"}),
    )
    .await;
    assert_error(code, &v, StatusCode::FORBIDDEN, "key prefixes");
    let (code, v) = post(
        st,
        &t,
        "/v1/jobs/recall",
        json!({"keys": ["a/x"], "to": to}),
    )
    .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{v}");
    assert_eq!(
        v["priority"], 10,
        "the default is capped at the token's maximum: {v}"
    );
    let (code, v) = post(
        st,
        &t,
        "/v1/jobs/recall",
        json!({"keys": ["a/x"], "to": to, "priority": -5000}),
    )
    .await;
    assert_error(code, &v, StatusCode::BAD_REQUEST, "out of range");
    // A reader asked to cancel is told it needs operate.
    let reader = token(st, "read", "/").await;
    let id = v["id"].as_str().unwrap_or("x").to_string();
    let (code, v) = call_as(
        st,
        Some(&reader),
        Method::POST,
        &format!("/v1/jobs/{id}/cancel"),
        None,
    )
    .await;
    assert_error(code, &v, StatusCode::FORBIDDEN, "`operate` scope");
}

/// One raw request with `token`: headers as given, the body as bytes; the status, headers and
/// body bytes of the answer.
async fn send(
    state: &AppState,
    token: &str,
    method: Method,
    uri: &str,
    headers: &[(&str, String)],
    body: Body,
) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .header("host", "localhost:8420")
        .header("authorization", format!("Bearer {token}"));
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let resp = router(state.clone())
        .oneshot(req.body(body).unwrap())
        .await
        .unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, 64 << 20).await.unwrap();
    (parts.status, parts.headers, bytes.to_vec())
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into()))
}

/// Upload directories in the spool.
fn uploads(state: &AppState) -> usize {
    std::fs::read_dir(&state.config().serve.spool_dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_type().unwrap().is_dir())
        .count()
}

fn body_of(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn sha_hex(b: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(b))
}

#[tokio::test]
async fn api_put_object_streams_to_the_spool_and_queues_an_archive() {
    let f = fixture_with(|c| {
        c.serve.max_object_bytes = 3 << 20;
        c.serve.spool_bytes = 5 << 20;
    })
    .await;
    let st = &f.state;
    // Larger than the JSON body limit (1 MiB): objects are streamed, not buffered.
    let data = body_of(2 << 20, 1);
    let (code, h, b) = send(
        st,
        &f.admin,
        Method::PUT,
        "/v1/objects/photos/2026/a.jpg?priority=5",
        &[("x-reel-sha256", sha_hex(&data))],
        Body::from(data.clone()),
    )
    .await;
    let job = json_of(&b);
    assert_eq!(code, StatusCode::ACCEPTED, "{job}");
    assert_eq!(h["x-reel-sha256"], sha_hex(&data).as_str());
    assert_eq!(job["kind"], "archive");
    assert_eq!(job["priority"], 5);
    assert_eq!(job["spec"]["key_prefix"], "photos/2026/");
    let src = job["spec"]["source"]["files"][0]
        .as_str()
        .unwrap()
        .to_string();
    assert!(src.ends_with("/a.jpg"), "{src}");
    assert!(
        std::path::Path::new(&src).starts_with(&st.config().serve.spool_dir),
        "{src}"
    );
    assert_eq!(std::fs::read(&src).unwrap(), data);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&src).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "the spooled file is private: {mode:o}");
    assert_eq!(st.spool().quota().used(), 2 << 20);

    // A wrong checksum, a bad header, a bad key, a foreign class: refused, nothing stays.
    type Case<'a> = (&'a str, Vec<(&'a str, String)>, StatusCode, &'a str);
    let cases: Vec<Case> = vec![
        (
            "/v1/objects/x",
            vec![("x-reel-sha256", sha_hex(b"other"))],
            StatusCode::BAD_REQUEST,
            "SHA-256",
        ),
        (
            "/v1/objects/x",
            vec![("x-reel-sha256", "zz".into())],
            StatusCode::BAD_REQUEST,
            "x-reel-sha256",
        ),
        (
            "/v1/objects/a//b",
            vec![],
            StatusCode::BAD_REQUEST,
            "empty segment",
        ),
        (
            "/v1/objects/x?class=nope",
            vec![],
            StatusCode::BAD_REQUEST,
            "nope",
        ),
        (
            "/v1/objects/x?priority=5000",
            vec![],
            StatusCode::BAD_REQUEST,
            "priority",
        ),
    ];
    for (uri, headers, want, needle) in cases {
        let (code, _, b) = send(
            st,
            &f.admin,
            Method::PUT,
            uri,
            &headers,
            Body::from(body_of(1000, 2)),
        )
        .await;
        assert_error(code, &json_of(&b), want, needle);
    }
    // A second upload of the key while the first is not on tape yet: 409 naming the job.
    let (code, _, b) = send(
        st,
        &f.admin,
        Method::PUT,
        "/v1/objects/photos/2026/a.jpg",
        &[],
        Body::from("v2"),
    )
    .await;
    let v = json_of(&b);
    assert_error(code, &v, StatusCode::CONFLICT, job["id"].as_str().unwrap());
    // Two checksums, or a length and a chunked encoding at once: refused.
    let two = vec![
        ("x-reel-sha256", sha_hex(b"x")),
        ("x-reel-sha256", sha_hex(b"y")),
    ];
    let (code, _, b) = send(
        st,
        &f.admin,
        Method::PUT,
        "/v1/objects/y",
        &two,
        Body::from("x"),
    )
    .await;
    assert_error(
        code,
        &json_of(&b),
        StatusCode::BAD_REQUEST,
        "more than once",
    );
    let both = vec![
        ("content-length", "1".to_string()),
        ("transfer-encoding", "chunked".to_string()),
    ];
    let (code, _, b) = send(
        st,
        &f.admin,
        Method::PUT,
        "/v1/objects/y",
        &both,
        Body::from("x"),
    )
    .await;
    assert_error(
        code,
        &json_of(&b),
        StatusCode::BAD_REQUEST,
        "Transfer-Encoding",
    );
    assert_eq!(uploads(st), 1, "a refused upload left its directory");
    assert_eq!(st.spool().quota().used(), 2 << 20);

    // Too large: said by Content-Length, or found while streaming a chunked body.
    let (code, _, b) = send(
        st,
        &f.admin,
        Method::PUT,
        "/v1/objects/big",
        &[],
        Body::from(body_of(4 << 20, 3)),
    )
    .await;
    assert_error(code, &json_of(&b), StatusCode::PAYLOAD_TOO_LARGE, "at most");
    let chunks = futures::stream::iter(
        (0..8).map(|i| Ok::<_, std::io::Error>(axum::body::Bytes::from(body_of(1 << 19, i)))),
    );
    let (code, _, b) = send(
        st,
        &f.admin,
        Method::PUT,
        "/v1/objects/big",
        &[],
        Body::from_stream(chunks),
    )
    .await;
    assert_error(code, &json_of(&b), StatusCode::PAYLOAD_TOO_LARGE, "at most");
    // The spool is full for now (3 MiB free of 5): 503 with Retry-After; never: 507.
    let (code, h, b) = send(
        st,
        &f.admin,
        Method::PUT,
        "/v1/objects/c",
        &[],
        Body::from(body_of(3 << 20, 4)),
    )
    .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{}", json_of(&b));
    let (code, h2, b) = send(
        st,
        &f.admin,
        Method::PUT,
        "/v1/objects/d",
        &[],
        Body::from(body_of(1 << 20, 5)),
    )
    .await;
    assert_error(
        code,
        &json_of(&b),
        StatusCode::SERVICE_UNAVAILABLE,
        "full for now",
    );
    assert!(h2.contains_key("retry-after"), "{h2:?} {h:?}");
    assert_eq!(uploads(st), 2);
    let big = fixture_with(|c| {
        c.serve.max_object_bytes = 8 << 20;
        c.serve.spool_bytes = 1 << 20;
    })
    .await;
    let (code, _, b) = send(
        &big.state,
        &big.admin,
        Method::PUT,
        "/v1/objects/e",
        &[],
        Body::from(body_of(2 << 20, 6)),
    )
    .await;
    assert_error(
        code,
        &json_of(&b),
        StatusCode::INSUFFICIENT_STORAGE,
        "never fit",
    );

    // The janitor frees an upload once its job ended.
    let id = job["id"].as_str().unwrap();
    let (code, v) = call(&f, Method::POST, &format!("/v1/jobs/{id}/cancel"), None).await;
    assert_eq!(code, StatusCode::OK, "{v}");
    assert_eq!(st.spool().sweep(st.queue().store()).await, 1);
    assert!(!std::path::Path::new(&src).exists());
    assert_eq!(st.spool().quota().used(), 3 << 20);
    assert_eq!(uploads(st), 1);
    // Its retry is checked as a submission is: the upload is gone, so it is refused now.
    let (code, v) = call(&f, Method::POST, &format!("/v1/jobs/{id}/retry"), None).await;
    assert_error(code, &v, StatusCode::CONFLICT, "does not exist");
    assert!(
        v["hint"].as_str().unwrap().contains("submit a new job"),
        "{v}"
    );
    assert_eq!(
        st.queue().store().require(id).await.unwrap().state,
        reel_queue::job::JobState::Cancelled
    );
}

#[tokio::test]
async fn a_key_is_uploaded_once_at_a_time() {
    let f = fixture().await;
    let st = &f.state;
    // The first upload's body is still arriving.
    let (tx, rx) = futures::channel::mpsc::unbounded::<std::io::Result<axum::body::Bytes>>();
    tx.unbounded_send(Ok(axum::body::Bytes::from_static(b"first part")))
        .unwrap();
    let first = {
        let (st, admin) = (st.clone(), f.admin.clone());
        tokio::spawn(async move {
            send(
                &st,
                &admin,
                Method::PUT,
                "/v1/objects/one/k",
                &[],
                Body::from_stream(rx),
            )
            .await
        })
    };
    let t0 = std::time::Instant::now();
    while uploads(st) == 0 {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "the first upload did not start"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let (code, _, b) = send(
        st,
        &f.admin,
        Method::PUT,
        "/v1/objects/one/k",
        &[],
        Body::from("second"),
    )
    .await;
    assert_error(code, &json_of(&b), StatusCode::CONFLICT, "being received");
    assert_eq!(uploads(st), 1, "the refused upload left a directory");
    // Another key is not held up.
    let (code, _, b) = send(
        st,
        &f.admin,
        Method::PUT,
        "/v1/objects/one/other",
        &[],
        Body::from("x"),
    )
    .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{}", json_of(&b));
    // The first ends and is queued; the key then waits for its job.
    tx.unbounded_send(Ok(axum::body::Bytes::from_static(b" and the rest")))
        .unwrap();
    drop(tx);
    let (code, _, b) = first.await.unwrap();
    let job = json_of(&b);
    assert_eq!(code, StatusCode::ACCEPTED, "{job}");
    let (code, _, b) = send(
        st,
        &f.admin,
        Method::PUT,
        "/v1/objects/one/k",
        &[],
        Body::from("second"),
    )
    .await;
    assert_error(
        code,
        &json_of(&b),
        StatusCode::CONFLICT,
        job["id"].as_str().unwrap(),
    );
    // A refused first upload (a wrong checksum) gives the key back at once.
    let bad = vec![("x-reel-sha256", sha_hex(b"not this"))];
    let (code, _, b) = send(
        st,
        &f.admin,
        Method::PUT,
        "/v1/objects/one/j",
        &bad,
        Body::from("x"),
    )
    .await;
    assert_error(code, &json_of(&b), StatusCode::BAD_REQUEST, "SHA-256");
    let (code, _, b) = send(
        st,
        &f.admin,
        Method::PUT,
        "/v1/objects/one/j",
        &[],
        Body::from("x"),
    )
    .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{}", json_of(&b));
}

#[tokio::test]
async fn api_objects_need_the_scope_and_the_key_prefix() {
    let f = fixture().await;
    let st = &f.state;
    let reader = token(st, "read", "/").await;
    let (code, _, b) = send(
        st,
        &reader,
        Method::PUT,
        "/v1/objects/x",
        &[],
        Body::from("x"),
    )
    .await;
    assert_error(code, &json_of(&b), StatusCode::FORBIDDEN, "submit");
    let (code, _, b) = send(st, &reader, Method::POST, "/v1/stage/x", &[], Body::empty()).await;
    assert_error(code, &json_of(&b), StatusCode::FORBIDDEN, "submit");
    let fenced = st
        .tokens()
        .create(
            "fenced",
            reel_queue::token::parse_scopes("read,submit").unwrap(),
            vec!["/".into()],
            vec!["team-a/".into()],
            50,
        )
        .await
        .unwrap()
        .bearer;
    for (m, uri) in [
        (Method::PUT, "/v1/objects/team-b/x"),
        (Method::GET, "/v1/objects/team-b/x"),
        (Method::POST, "/v1/stage/team-b/x"),
    ] {
        let (code, _, b) = send(st, &fenced, m.clone(), uri, &[], Body::from("x")).await;
        assert_error(code, &json_of(&b), StatusCode::FORBIDDEN, "key prefixes");
    }
    assert_eq!(uploads(st), 0);
    // Without a token: 401, nothing read.
    let req = Request::builder()
        .method(Method::PUT)
        .uri("/v1/objects/team-a/x")
        .header("host", "localhost")
        .body(Body::from("x"))
        .unwrap();
    let resp = router(st.clone()).oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(uploads(st), 0);
    // Unknown objects: 404 for GET and stage.
    let (code, _, b) = send(
        st,
        &fenced,
        Method::GET,
        "/v1/objects/team-a/none",
        &[],
        Body::empty(),
    )
    .await;
    assert_error(code, &json_of(&b), StatusCode::NOT_FOUND, "team-a/none");
    let (code, _, b) = send(
        st,
        &fenced,
        Method::POST,
        "/v1/stage/team-a/none",
        &[],
        Body::empty(),
    )
    .await;
    assert_error(code, &json_of(&b), StatusCode::NOT_FOUND, "team-a/none");
}

#[tokio::test]
async fn the_dashboard_is_open_and_its_data_needs_a_token() {
    let f = fixture().await;
    let st = &f.state;
    for (path, kind) in [
        ("/", "text/html"),
        ("/dashboard", "text/html"),
        ("/dashboard/dashboard.js", "text/javascript"),
        ("/dashboard/dashboard.css", "text/css"),
    ] {
        let req = Request::builder()
            .uri(path)
            .header("host", "localhost")
            .body(Body::empty())
            .unwrap();
        let resp = router(st.clone()).oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        let h = resp.headers();
        assert!(
            h["content-type"].to_str().unwrap().starts_with(kind),
            "{path}"
        );
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(
            csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
            "{csp}"
        );
        assert_eq!(h["x-frame-options"], "DENY");
    }
    let (code, v) = call_as(st, None, Method::GET, "/v1/library", None).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED, "{v}");
    let reader = token(st, "read", "/").await;
    let (code, v) = call_as(st, Some(&reader), Method::GET, "/v1/library", None).await;
    assert_eq!(code, StatusCode::OK, "{v}");
    assert_eq!(v["drives"], json!([]));
    assert_eq!(v["seen_ms"], 0);
    // What a worker records shows, with each cartridge's place.
    reel_queue::Inventory::new(st.queue().store().db().clone())
        .publish(
            "w",
            "lib",
            &[
                reel_queue::ElementView {
                    library: "lib".into(),
                    kind: "drive".into(),
                    index: 0,
                    address: 1,
                    barcode: None,
                    full: false,
                    flags: 0,
                },
                reel_queue::ElementView {
                    library: "lib".into(),
                    kind: "slot".into(),
                    index: 4,
                    address: 1004,
                    barcode: Some("A00004L9".into()),
                    full: true,
                    flags: reel_plugin_abi::REEL_ELEMENT_FULL,
                },
            ],
        )
        .await
        .unwrap();
    st.catalogue()
        .add_cartridge("A00004L9", false, 1 << 40)
        .await
        .unwrap();
    let (_, v) = call_as(st, Some(&reader), Method::GET, "/v1/library", None).await;
    assert_eq!(v["drives"][0]["state"], "offline", "{v}");
    assert_eq!(v["cartridges"][0]["location"], "slot 4", "{v}");
    assert_eq!(v["elements"].as_array().unwrap().len(), 2, "{v}");
}

/// Drives through the API: listed with `read`, taken down and up with `operate` (recorded as
/// the token), and bad requests refused with what to do.
#[tokio::test]
async fn api_drives_down_and_up() {
    let f = fixture().await;
    let st = &f.state;
    // A drive its worker took down by itself (what makes it known here, with no worker).
    reel_queue::DriveStates::new(st.queue().store().db().clone())
        .down_automatically("lib-0", "3 drive failures", "w1")
        .await
        .unwrap();
    let reader = token(st, "read", "/").await;
    let (s, v) = call_as(st, Some(&reader), Method::GET, "/v1/drives", None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["drives"][0]["drive"], "lib-0", "{v}");
    assert_eq!(v["drives"][0]["state"], "down", "{v}");
    assert_eq!(v["drives"][0]["automatic"], true, "{v}");
    let (s, v) = post(st, &reader, "/v1/drives/lib-0/up", json!({})).await;
    assert_error(s, &v, StatusCode::FORBIDDEN, "operate");
    let (s, v) = call(
        &f,
        Method::POST,
        "/v1/drives/lib-0/down",
        Some(json!({"reason": " "})),
    )
    .await;
    assert_error(s, &v, StatusCode::BAD_REQUEST, "no reason given");
    let (s, v) = call(
        &f,
        Method::POST,
        "/v1/drives/lib-0/down",
        Some(json!({"why": "x"})),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, v) = call(
        &f,
        Method::POST,
        "/v1/drives/lib-9/down",
        Some(json!({"reason": "x"})),
    )
    .await;
    assert_error(
        s,
        &v,
        StatusCode::NOT_FOUND,
        "no worker has seen a drive `lib-9`",
    );
    let (s, v) = call(&f, Method::GET, "/v1/drives/lib-9", None).await;
    assert_error(s, &v, StatusCode::NOT_FOUND, "lib-9");
    let (s, v) = call(
        &f,
        Method::POST,
        "/v1/drives/lib-0/up",
        Some(json!({"reason": "replaced"})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["state"], "up", "{v}");
    assert_eq!(v["automatic"], false, "{v}");
    assert!(v["by"].as_str().unwrap().starts_with("token:"), "{v}");
    let (s, v) = call(
        &f,
        Method::POST,
        "/v1/drives/lib-0/down",
        Some(json!({"reason": "cleaning"})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, v) = call(&f, Method::GET, "/v1/drives/lib-0", None).await;
    assert_eq!(
        (s, v["state"].clone(), v["reason"].clone()),
        (StatusCode::OK, json!("down"), json!("cleaning")),
        "{v}"
    );
    // A reset is asked for (operate), seen (read), and refused for a drive in service.
    let (s, v) = call(&f, Method::GET, "/v1/drives/lib-0/reset", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let (s, v) = post(st, &reader, "/v1/drives/lib-0/reset", json!({})).await;
    assert_error(s, &v, StatusCode::FORBIDDEN, "operate");
    let (s, v) = call(&f, Method::POST, "/v1/drives/lib-0/reset", None).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    assert_eq!(v["done_ms"], 0, "{v}");
    let (s, v) = call_as(
        st,
        Some(&reader),
        Method::GET,
        "/v1/drives/lib-0/reset",
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(
        v["requested_by"].as_str().unwrap().starts_with("token:"),
        "{v}"
    );
    call(&f, Method::POST, "/v1/drives/lib-0/up", Some(json!({}))).await;
    // Brought up before a worker did it: closed, never done later.
    let (_, v) = call(&f, Method::GET, "/v1/drives/lib-0/reset", None).await;
    assert!(v["done_ms"].as_i64().unwrap() > 0, "{v}");
    assert!(
        v["result"].as_str().unwrap().contains("brought up first"),
        "{v}"
    );
    let (s, v) = call(&f, Method::GET, "/v1/drives/..%2Fx/reset", None).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, v) = call(&f, Method::POST, "/v1/drives/lib-0/reset", None).await;
    assert_error(s, &v, StatusCode::BAD_REQUEST, "take it down first");
    // A cleaning is asked for on a drive in service too; unknown drives are refused.
    let (s, v) = call(&f, Method::GET, "/v1/drives/lib-0/clean", None).await;
    assert_error(s, &v, StatusCode::NOT_FOUND, "never cleaned");
    let (s, v) = post(st, &reader, "/v1/drives/lib-0/clean", json!({})).await;
    assert_error(s, &v, StatusCode::FORBIDDEN, "operate");
    let (s, v) = call(&f, Method::POST, "/v1/drives/lib-0/clean", None).await;
    assert_eq!(
        (s, v["done_ms"].clone()),
        (StatusCode::ACCEPTED, json!(0)),
        "{v}"
    );
    let (s, v) = call_as(
        st,
        Some(&reader),
        Method::GET,
        "/v1/drives/lib-0/clean",
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, v) = call(&f, Method::POST, "/v1/drives/lib-9/clean", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let (s, v) = call(&f, Method::GET, "/v1/cleaning-cartridges", None).await;
    assert_eq!(
        (s, v["cleaning_cartridges"].as_array().map(Vec::len)),
        (StatusCode::OK, Some(0)),
        "{v}"
    );
}

#[tokio::test]
async fn api_drive_requests_must_be_objects() {
    let f = fixture().await;
    reel_queue::DriveStates::new(f.state.queue().store().db().clone())
        .down_automatically("lib-0", "x", "w1")
        .await
        .unwrap();
    for body in [json!([]), json!("x"), json!(null), json!({"reason": 5})] {
        let (s, v) = call(&f, Method::POST, "/v1/drives/lib-0/up", Some(body.clone())).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}: {v}");
    }
}

/// Cartridges through the API: listed and shown with `read`, a state set with `operate` and a
/// reason (recorded as the token), bad requests refused.
#[tokio::test]
async fn api_cartridge_states() {
    let f = fixture().await;
    let st = &f.state;
    let cat = st.catalogue();
    cat.add_cartridge("B00001L9", false, 0).await.unwrap();
    let reader = token(st, "read", "/").await;
    let (s, v) = call_as(st, Some(&reader), Method::GET, "/v1/cartridges", None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["cartridges"][0]["barcode"], "B00001L9", "{v}");
    assert_eq!(v["cartridges"][0]["free_bytes"], Value::Null, "{v}");
    let (s, v) = call_as(
        st,
        Some(&reader),
        Method::GET,
        "/v1/cartridges?state=nope",
        None,
    )
    .await;
    assert_error(s, &v, StatusCode::BAD_REQUEST, "not a cartridge state");
    let (s, v) = post(
        st,
        &reader,
        "/v1/cartridges/B00001L9/state",
        json!({"state": "broken", "reason": "x"}),
    )
    .await;
    assert_error(s, &v, StatusCode::FORBIDDEN, "operate");
    let uri = "/v1/cartridges/B00001L9/state";
    let (s, v) = call(
        &f,
        Method::POST,
        uri,
        Some(json!({"state": "broken", "reason": ""})),
    )
    .await;
    assert_error(s, &v, StatusCode::BAD_REQUEST, "no reason given");
    let (s, v) = call(
        &f,
        Method::POST,
        uri,
        Some(json!({"state": "exported", "reason": "x"})),
    )
    .await;
    assert_error(s, &v, StatusCode::BAD_REQUEST, "by hand");
    // Never labelled: the catalogue refuses `active`.
    let (s, v) = call(
        &f,
        Method::POST,
        uri,
        Some(json!({"state": "active", "reason": "x"})),
    )
    .await;
    assert_error(s, &v, StatusCode::CONFLICT, "never labelled");
    let (s, v) = call(
        &f,
        Method::POST,
        "/v1/cartridges/NOPE01L9/state",
        Some(json!({"state": "broken", "reason": "x"})),
    )
    .await;
    assert_error(s, &v, StatusCode::NOT_FOUND, "NOPE01L9");
    let (s, v) = call(
        &f,
        Method::POST,
        uri,
        Some(json!({"state": "broken", "reason": "dropped"})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        (v["state"].clone(), v["state_reason"].clone()),
        (json!("broken"), json!("dropped")),
        "{v}"
    );
    assert!(v["state_by"].as_str().unwrap().starts_with("token:"), "{v}");
    let (s, v) = call(&f, Method::GET, "/v1/cartridges/B00001L9", None).await;
    assert_eq!(
        (s, v["state"].clone()),
        (StatusCode::OK, json!("broken")),
        "{v}"
    );
    let (s, v) = call(
        &f,
        Method::GET,
        "/v1/cartridges?state=broken&pool=none",
        None,
    )
    .await;
    assert_eq!(
        (s, v["cartridges"].as_array().map(Vec::len)),
        (StatusCode::OK, Some(0)),
        "{v}"
    );
}

#[tokio::test]
async fn api_vault_export_import_and_wanted() {
    let f = fixture().await;
    let st = &f.state;
    let cat = st.catalogue();
    cat.add_cartridge("V00001L9", false, 0).await.unwrap();
    cat.add_cartridge("V00002L9", false, 0).await.unwrap();
    let reader = token(st, "read", "/").await;
    let (s, v) = post(
        st,
        &reader,
        "/v1/vault/export",
        json!({"barcodes": ["V00001L9"], "to": "vault B"}),
    )
    .await;
    assert_error(s, &v, StatusCode::FORBIDDEN, "operate");
    for (body, needle) in [
        (json!({"barcodes": [], "to": "v"}), "no cartridge given"),
        (
            json!({"barcodes": ["V00001L9", "V00001L9"], "to": "v"}),
            "given twice",
        ),
        (
            json!({"barcodes": ["V00001L9"], "to": ""}),
            "location is empty",
        ),
        (
            json!({"barcodes": ["V00001L9"], "to": "x".repeat(201)}),
            "at most 200",
        ),
        (json!({"barcodes": ["a b"], "to": "v"}), "not a barcode"),
    ] {
        let (s, v) = call(&f, Method::POST, "/v1/vault/export", Some(body)).await;
        assert_error(s, &v, StatusCode::BAD_REQUEST, needle);
    }
    // One unknown barcode: none is exported.
    let (s, v) = call(
        &f,
        Method::POST,
        "/v1/vault/export",
        Some(json!({"barcodes": ["V00001L9", "NOPE01L9"], "to": "v"})),
    )
    .await;
    assert_error(s, &v, StatusCode::NOT_FOUND, "NOPE01L9");
    let (s, v) = call(&f, Method::GET, "/v1/vault", None).await;
    assert_eq!(
        (s, v["vaulted"].as_array().map(Vec::len)),
        (StatusCode::OK, Some(0)),
        "{v}"
    );
    let (s, v) = call(
        &f,
        Method::POST,
        "/v1/vault/export",
        Some(json!({"barcodes": ["V00001L9", "V00002L9"], "to": "vault B"})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["exported"][0]["location"], "vault B", "{v}");
    assert_eq!(v["exported"][1]["left"], false, "{v}");
    let (s, v) = call(&f, Method::GET, "/v1/cartridges/V00001L9", None).await;
    assert_eq!(
        (s, v["state"].clone()),
        (StatusCode::OK, json!("exported")),
        "{v}"
    );
    let (s, v) = call(
        &f,
        Method::POST,
        "/v1/vault/export",
        Some(json!({"barcodes": ["V00001L9"], "to": "elsewhere"})),
    )
    .await;
    assert_error(
        s,
        &v,
        StatusCode::BAD_REQUEST,
        "already exported (to vault B)",
    );
    // No work waits for them.
    let (s, v) = call_as(st, Some(&reader), Method::GET, "/v1/vault/wanted", None).await;
    assert_eq!(
        (s, v["wanted"].as_array().map(Vec::len)),
        (StatusCode::OK, Some(0)),
        "{v}"
    );
    // An import is a request a worker carries out.
    let (s, v) = call(
        &f,
        Method::POST,
        "/v1/vault/import",
        Some(json!({"barcodes": ["V00001L9"]})),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    assert_eq!(v["done_ms"], 0, "{v}");
    let id = v["id"].as_i64().unwrap();
    let (s, v) = call(&f, Method::GET, &format!("/v1/vault/imports/{id}"), None).await;
    assert_eq!(
        (s, v["barcodes"][0].clone()),
        (StatusCode::OK, json!("V00001L9")),
        "{v}"
    );
    let (s, v) = call(&f, Method::GET, "/v1/vault/imports/999", None).await;
    assert_error(s, &v, StatusCode::NOT_FOUND, "no import request 999");
    let (s, v) = call(&f, Method::GET, "/v1/vault/imports/x", None).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, v) = call(
        &f,
        Method::POST,
        "/v1/vault/import",
        Some(json!({"barcodes": ["A", "A"]})),
    )
    .await;
    assert_error(s, &v, StatusCode::BAD_REQUEST, "given twice");
    let (s, v) = call(
        &f,
        Method::POST,
        "/v1/vault/import",
        Some(json!({"library": "lib\n-0"})),
    )
    .await;
    assert_error(s, &v, StatusCode::BAD_REQUEST, "not one reel gives");
    let many: Vec<String> = (0..1001).map(|i| format!("B{i}")).collect();
    let (s, v) = call(
        &f,
        Method::POST,
        "/v1/vault/import",
        Some(json!({ "barcodes": many })),
    )
    .await;
    assert_error(s, &v, StatusCode::BAD_REQUEST, "1001 barcodes");
    let (s, v) = call(
        &f,
        Method::POST,
        "/v1/vault/import",
        Some(json!({"nope": 1})),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, v) = post(st, &reader, "/v1/vault/import", json!({})).await;
    assert_error(s, &v, StatusCode::FORBIDDEN, "operate");
}

#[tokio::test]
async fn api_queues_and_failed_requests() {
    use reel_queue::job::{JobSpec, VerifyJob, VerifyTarget};
    use reel_queue::mount::MountTarget;
    use reel_queue::{NewTapeRequest, TapeRequests};
    let f = fixture().await;
    let st = &f.state;
    let job = st
        .queue()
        .submit(
            JobSpec::Verify(VerifyJob {
                target: VerifyTarget::Cartridge("A00001L9".into()),
            }),
            None,
        )
        .await
        .unwrap();
    let id = job.id.clone();
    let task = st
        .queue()
        .store()
        .require(&id)
        .await
        .unwrap()
        .apalis_task_id;
    let started = st
        .queue()
        .store()
        .start(&id, "w1", task.as_deref().unwrap_or("t1"))
        .await
        .unwrap();
    assert!(
        matches!(started, reel_queue::StartOutcome::Run { .. }),
        "{started:?}"
    );
    let reqs = TapeRequests::new(st.queue().store().db().clone());
    let read = |key: &str| NewTapeRequest {
        target: MountTarget::Read {
            barcode: "A00001L9".into(),
        },
        pool: Some("p1".into()),
        object_key: key.into(),
        bytes: 10,
        files: 1,
        priority: 10,
        detail: json!({}),
    };
    reqs.add(&id, &[read("k1"), read("k2")]).await.unwrap();
    let reader = token(st, "read", "/").await;
    let (s, v) = call_as(st, Some(&reader), Method::GET, "/v1/queues", None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["queues"][0]["cartridge"], "A00001L9", "{v}");
    assert_eq!(v["queues"][0]["files"], 2, "{v}");
    assert_eq!(v["queues"][0]["rule"], "no_worker", "{v}");
    let (s, v) = call(&f, Method::GET, &format!("/v1/jobs/{id}"), None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["waits"][0]["rule"], "no_worker", "{v}");
    assert_eq!(v["waits"][0]["files"], 2, "{v}");
    assert_eq!(v["failures"], json!([]), "{v}");
    let (_, metrics) = call(&f, Method::GET, "/metrics", None).await;
    assert!(
        metrics
            .as_str()
            .unwrap()
            .contains("reel_tape_queue_held{mode=\"read\",target=\"A00001L9\",pool=\"p1\",rule=\"no_worker\"} 1"),
        "{metrics}"
    );

    // One request fails, then the job: listed with its reason until an operator drops it.
    let queued = reqs.queued_reads_of("A00001L9").await.unwrap();
    assert!(
        reqs.fail_queued(queued[1].id, "disk on fire")
            .await
            .unwrap()
    );
    st.queue()
        .store()
        .fail_attempt(
            &id,
            "1 of 2 objects failed",
            false,
            true,
            std::time::Duration::ZERO,
        )
        .await
        .unwrap();
    let (s, v) = call_as(st, Some(&reader), Method::GET, "/v1/failed-requests", None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["failed"][0]["reason"], "disk on fire", "{v}");
    assert_eq!(v["failed"][0]["job"], id.as_str(), "{v}");
    for bad in ["limit=0", "limit=5000", "bogus=1"] {
        let (s, v) = call(&f, Method::GET, &format!("/v1/failed-requests?{bad}"), None).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{bad}: {v}");
    }
    let drop = format!("/v1/jobs/{id}/drop-failures");
    let (s, v) = post(st, &reader, &drop, json!({})).await;
    assert_error(s, &v, StatusCode::FORBIDDEN, "operate");
    let (s, v) = call(&f, Method::POST, "/v1/jobs/nope/drop-failures", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let (s, v) = call(&f, Method::POST, &drop, None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["failed"], 1, "{v}");
    let (_, v) = call(&f, Method::GET, "/v1/failed-requests", None).await;
    assert_eq!(v["failed"], json!([]), "{v}");
    let (_, v) = call(&f, Method::GET, &format!("/v1/jobs/{id}"), None).await;
    assert_eq!(v["failures"][0]["reason"], "disk on fire", "{v}");
}

#[tokio::test]
async fn api_delete_undelete_recycle_and_holds() {
    let f = fixture().await;
    let st = &f.state;
    seed(st, "S00001", "a/x").await;
    seed(st, "S00002", "a/y").await;
    seed(st, "S00003", "b/x").await;
    let client = prefixed_token(st, "client", "a/", 50).await;
    // Outside the token's key prefixes; no reason; keys and a prefix; an empty prefix; a key
    // with nothing to delete; a key twice.
    for (body, status, needle) in [
        (
            json!({"keys": ["b/x"], "reason": "r"}),
            StatusCode::FORBIDDEN,
            "key prefixes",
        ),
        (
            json!({"prefix": "b/", "reason": "r"}),
            StatusCode::FORBIDDEN,
            "key prefixes",
        ),
        (
            json!({"keys": ["a/x"], "reason": " "}),
            StatusCode::BAD_REQUEST,
            "reason",
        ),
        (
            json!({"keys": ["a/x"], "prefix": "a/", "reason": "r"}),
            StatusCode::BAD_REQUEST,
            "both",
        ),
        (
            json!({"keys": ["a/nope"], "reason": "r"}),
            StatusCode::BAD_REQUEST,
            "nothing to delete",
        ),
        (
            json!({"keys": ["a/x", "a/x"], "reason": "r"}),
            StatusCode::BAD_REQUEST,
            "twice",
        ),
        (
            json!({"keys": [], "reason": "r"}),
            StatusCode::BAD_REQUEST,
            "at least one key",
        ),
    ] {
        let (code, v) = post(st, &client, "/v1/jobs/delete", body.clone()).await;
        assert_error(code, &v, status, needle);
    }
    let (code, v) = call(
        &f,
        Method::POST,
        "/v1/jobs/delete",
        Some(json!({"prefix": "", "reason": "r"})),
    )
    .await;
    assert_error(code, &v, StatusCode::BAD_REQUEST, "empty prefix");
    // Holds: only an admin places and releases one; a delete meeting it is refused.
    let (code, v) = post(
        st,
        &client,
        "/v1/holds",
        json!({"key": "a/x", "reason": "case"}),
    )
    .await;
    assert_error(code, &v, StatusCode::FORBIDDEN, "`admin` scope");
    let (code, v) = call(
        &f,
        Method::POST,
        "/v1/holds",
        Some(json!({"key": "a/x", "prefix": "a/", "reason": "case"})),
    )
    .await;
    assert_error(code, &v, StatusCode::BAD_REQUEST, "exactly one");
    let (code, hold) = call(
        &f,
        Method::POST,
        "/v1/holds",
        Some(json!({"key": "a/x", "reason": "case 9"})),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{hold}");
    assert!(
        hold["placed_by"]
            .as_str()
            .unwrap_or_default()
            .starts_with("token:"),
        "{hold}"
    );
    let id = hold["id"].as_i64().unwrap();
    for body in [
        json!({"keys": ["a/x"], "reason": "r"}),
        json!({"prefix": "a/", "reason": "r"}),
    ] {
        let (code, v) = post(st, &client, "/v1/jobs/delete", body).await;
        assert_error(code, &v, StatusCode::CONFLICT, "legal hold");
    }
    let (code, v) = call(&f, Method::GET, "/v1/holds", None).await;
    assert_eq!(
        (code, v["holds"].as_array().map(Vec::len)),
        (StatusCode::OK, Some(1)),
        "{v}"
    );
    let (code, v) = post(
        st,
        &client,
        &format!("/v1/holds/{id}/release"),
        json!({"reason": "done"}),
    )
    .await;
    assert_error(code, &v, StatusCode::FORBIDDEN, "`admin` scope");
    let (code, v) = call(
        &f,
        Method::POST,
        &format!("/v1/holds/{id}/release"),
        Some(json!({"reason": "done"})),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{v}");
    assert_eq!(v["active"], false, "{v}");
    let (code, v) = call(
        &f,
        Method::POST,
        &format!("/v1/holds/{id}/release"),
        Some(json!({"reason": "again"})),
    )
    .await;
    assert_error(code, &v, StatusCode::BAD_REQUEST, "released already");
    let (code, v) = call(&f, Method::GET, "/v1/holds?all=true", None).await;
    assert_eq!(
        (code, v["holds"].as_array().map(Vec::len)),
        (StatusCode::OK, Some(1)),
        "{v}"
    );
    // Now the delete is queued, as the token's.
    let (code, v) = post(
        st,
        &client,
        "/v1/jobs/delete",
        json!({"prefix": "a/", "reason": "tidy"}),
    )
    .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{v}");
    assert_eq!(v["kind"], "delete", "{v}");
    // The job runs on a worker; mark the objects here as it would, then undelete over HTTP.
    let cat = st.catalogue();
    let scope = reel_engine::catalogue::DeleteScope::Prefix("a/");
    let d = cat
        .open_deletion("j", "token:x (client)", "tidy", &scope, 86_400)
        .await
        .unwrap();
    assert_eq!(cat.delete_batch(d, &scope, "", 100).await.unwrap().keys, 2);
    let (code, v) = call(&f, Method::GET, "/v1/catalog/recycle?prefix=a/", None).await;
    assert_eq!(code, StatusCode::OK, "{v}");
    assert_eq!(v["objects"].as_array().map(Vec::len), Some(2), "{v}");
    let (code, v) = call(&f, Method::GET, "/v1/catalog/recycle?limit=0", None).await;
    assert_error(code, &v, StatusCode::BAD_REQUEST, "out of range");
    let (code, v) = post(
        st,
        &client,
        "/v1/catalog/undelete",
        json!({"keys": ["b/x"]}),
    )
    .await;
    assert_error(code, &v, StatusCode::FORBIDDEN, "key prefixes");
    let (code, v) = post(
        st,
        &client,
        "/v1/catalog/undelete",
        json!({"keys": ["a/x"]}),
    )
    .await;
    assert_eq!((code, v["keys"].as_u64()), (StatusCode::OK, Some(1)), "{v}");
    let (code, v) = post(
        st,
        &client,
        "/v1/catalog/undelete",
        json!({"keys": ["a/x"]}),
    )
    .await;
    assert_error(
        code,
        &v,
        StatusCode::BAD_REQUEST,
        "nothing of it is deleted",
    );
    let (code, v) = post(st, &client, "/v1/catalog/undelete", json!({"prefix": "a/"})).await;
    assert_eq!((code, v["keys"].as_u64()), (StatusCode::OK, Some(1)), "{v}");
    let (code, v) = call(&f, Method::GET, "/v1/catalog/objects?prefix=a/", None).await;
    assert_eq!(
        (code, v.as_array().map(Vec::len)),
        (StatusCode::OK, Some(2)),
        "{v}"
    );
}

/// Repack and reclaim over HTTP: `operate` only; a selection refused with what is wrong; the
/// dry run names what a repack would take; a job queued as asked by the token; reclaim refused
/// while a cartridge holds live data, and its checks say why.
#[tokio::test]
async fn api_repack_and_reclaim() {
    let f = fixture().await;
    let st = &f.state;
    seed(st, "S00001", "a/x").await;
    // Another cartridge of the pool, for the copies to go to.
    seed(st, "S00002", "a/y").await;
    let submitter = token(st, "submit", "/tmp").await;
    let (code, v) = post(
        st,
        &submitter,
        "/v1/jobs/repack",
        json!({"barcodes": ["S00001"]}),
    )
    .await;
    assert_error(code, &v, StatusCode::FORBIDDEN, "operate");
    let (code, v) = post(
        st,
        &submitter,
        "/v1/jobs/reclaim",
        json!({"barcodes": ["S00001"]}),
    )
    .await;
    assert_error(code, &v, StatusCode::FORBIDDEN, "operate");
    for (body, needle) in [
        (json!({}), "name the cartridges"),
        (json!({"barcodes": ["NOPE01"]}), "not in the catalogue"),
        (json!({"barcodes": ["S00001", "S00001"]}), "twice"),
        (
            json!({"barcodes": ["S00001"], "live_below": 7.0}),
            "fraction",
        ),
        (json!({"state": "sideways"}), "not a cartridge state"),
        (json!({"media": "LTO-99"}), "media generation"),
        (
            json!({"barcodes": ["S00001"], "add_copies": true}),
            "to_pool",
        ),
        (
            json!({"barcodes": ["S00001"], "to_pool": "nowhere"}),
            "no such pool",
        ),
        (json!({"pool": "p9"}), "matches no cartridge"),
    ] {
        let (code, v) = call(&f, Method::POST, "/v1/jobs/repack", Some(body.clone())).await;
        assert_error(code, &v, StatusCode::BAD_REQUEST, needle);
    }
    let (code, v) = call(
        &f,
        Method::POST,
        "/v1/repack/dry-run",
        Some(json!({"barcodes": ["S00001"]})),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{v}");
    assert_eq!(v["cartridges"][0]["barcode"], "S00001", "{v}");
    assert_eq!(v["cartridges"][0]["live_objects"], 1, "{v}");
    let (code, v) = call(&f, Method::GET, "/v1/repack/policy", None).await;
    assert_eq!(code, StatusCode::OK, "{v}");
    assert_eq!(v["auto"], false, "{v}");
    // Reclaim: refused while it holds a live object; the checks say so.
    let (code, v) = call(
        &f,
        Method::POST,
        "/v1/jobs/reclaim",
        Some(json!({"barcodes": ["S00001"]})),
    )
    .await;
    assert_error(code, &v, StatusCode::BAD_REQUEST, "is active");
    let (code, v) = call(
        &f,
        Method::POST,
        "/v1/jobs/reclaim",
        Some(json!({"barcodes": []})),
    )
    .await;
    assert_error(code, &v, StatusCode::BAD_REQUEST, "empty");
    let (code, v) = call(
        &f,
        Method::POST,
        "/v1/jobs/reclaim",
        Some(json!({"barcodes": ["S00001", "S00001"]})),
    )
    .await;
    assert_error(code, &v, StatusCode::BAD_REQUEST, "twice");
    let (code, v) = call(&f, Method::GET, "/v1/reclaim?barcode=S00001", None).await;
    assert_eq!(code, StatusCode::OK, "{v}");
    assert_eq!(v["cartridges"][0]["live"], 1, "{v}");
    assert!(v["cartridges"][0]["kept_because"].is_string(), "{v}");
    // The repack job, queued as asked by the admin token.
    let (code, v) = call(
        &f,
        Method::POST,
        "/v1/jobs/repack",
        Some(json!({"barcodes": ["S00001"]})),
    )
    .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{v}");
    assert_eq!(v["kind"], "repack", "{v}");
    assert_eq!(v["priority"], 5, "{v}");
}
