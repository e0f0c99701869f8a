//! Tests of the HTTP API through the router (tower `oneshot`), on SQLite in a temporary directory.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::{AppState, router};
use crate::config::LoadedConfig;
use crate::queue::JobQueue;

struct Fixture {
    state: AppState,
    _dir: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let loaded = LoadedConfig::load_with(None, Some(dir.path()), &Default::default()).unwrap();
    let queue = JobQueue::open(&loaded.config).await.unwrap();
    let catalogue = reel_engine::catalogue::Catalogue::open(&loaded.config.store.url)
        .await
        .unwrap();
    Fixture {
        state: AppState::new(loaded.config, queue, catalogue),
        _dir: dir,
    }
}

/// One request; returns the status and the body (JSON when it parses, else a JSON string).
async fn call(
    state: &AppState,
    method: Method,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let req = Request::builder().method(method).uri(uri);
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
    let s = &f.state;
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
    assert_eq!(list.as_array().unwrap().len(), 2, "{list}");
    let (_, list) = call(s, Method::GET, "/v1/jobs?state=queued&limit=1", None).await;
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    let (_, list) = call(s, Method::GET, "/v1/jobs?state=done", None).await;
    assert_eq!(list, json!([]));

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
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");

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
    let s = &f.state;
    seed(s, "S00001", "x/a.txt").await;
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
    let want = crate::cli::archive_spec(
        &crate::config::Config::default(),
        &[tree.path().to_path_buf()],
        None,
        "x/".into(),
    )
    .unwrap();
    assert_eq!(v["spec"], serde_json::to_value(&want).unwrap());

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
}

#[tokio::test]
async fn api_bad_input_is_400_and_unknown_is_404() {
    let f = fixture().await;
    let s = &f.state;
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
    }
    // Not JSON at all.
    let req = Request::builder()
        .method(Method::POST)
        .uri("/v1/jobs/intake")
        .header("content-type", "application/json")
        .body(Body::from("{nope"))
        .unwrap();
    let resp = router(s.clone()).oneshot(req).await.unwrap();
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
    let s = &f.state;
    let id = seed(s, "S00001", "kept/a.txt").await;
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
    assert_eq!(list, json!([]), "nothing was queued");

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
    let s = &f.state;
    match s.queue().store().db() {
        crate::db::Db::Sqlite(p) => p.close().await,
        crate::db::Db::Postgres(p) => p.close().await,
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
    let (st, doc) = call(&f.state, Method::GET, "/openapi.json", None).await;
    assert_eq!(st, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."), "{doc}");
    let paths = doc["paths"].as_object().unwrap();
    let want = [
        ("/v1/jobs/archive", "post"),
        ("/v1/jobs/recall", "post"),
        ("/v1/jobs/verify", "post"),
        ("/v1/jobs/intake", "post"),
        ("/v1/jobs", "get"),
        ("/v1/jobs/{id}", "get"),
        ("/v1/jobs/{id}/cancel", "post"),
        ("/v1/jobs/{id}/retry", "post"),
        ("/v1/catalog/objects", "get"),
        ("/v1/catalog/objects/{key}", "get"),
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
    assert_eq!(
        paths.len(),
        want.len(),
        "routes not in the test: {:?}",
        paths.keys()
    );
    // Every route the document names answers (not the router's 404 fallback).
    for (path, method) in want {
        let uri = path.replace("{id}", "x").replace("{key}", "k");
        let m = if method == "get" {
            Method::GET
        } else {
            Method::POST
        };
        let (_, v) = call(&f.state, m, &uri, Some(json!({}))).await;
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
    let s = &f.state;
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
    let s = &f.state;
    let file = s.queue().store().db().location();
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
    // Reads still answer meanwhile.
    let (st, _) = call(s, Method::GET, "/v1/jobs", None).await;
    assert_eq!(st, StatusCode::OK);
    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
    let (st, v) = call(s, Method::GET, "/healthz", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
}
