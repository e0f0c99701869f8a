//! The OpenAPI document, derived from the handlers' `#[utoipa::path]` annotations.

use axum::response::Json;
use utoipa::OpenApi;

use super::{
    cartridges, catalog, drives, jobs, library, lifecycle, metrics, objects, queues, repack, vault,
};

/// reel's OpenAPI 3.1 document: every route of [`super::router`].
#[derive(OpenApi)]
#[openapi(
    info(
        title = "reel",
        description = "reel's HTTP API: submit archive, recall, verify and intake jobs, follow, cancel and retry them, look the catalogue up, upload and download objects. Errors are JSON {error, hint, status}."
    ),
    paths(
        jobs::submit_archive,
        jobs::submit_recall,
        jobs::submit_verify,
        jobs::submit_intake,
        lifecycle::submit_delete,
        lifecycle::undelete,
        lifecycle::recycle,
        lifecycle::holds,
        lifecycle::place_hold,
        lifecycle::release_hold,
        repack::submit_repack,
        repack::dry_run,
        repack::policy,
        repack::submit_reclaim,
        repack::reclaim_checks,
        jobs::list,
        jobs::show,
        jobs::cancel,
        jobs::retry,
        queues::drop_failures,
        queues::failed,
        queues::list,
        catalog::list,
        catalog::find,
        objects::put_object,
        objects::stage_object,
        objects::get_object,
        library::show,
        cartridges::list,
        cartridges::show,
        cartridges::set,
        vault::vaulted,
        vault::wanted,
        vault::export,
        vault::import,
        vault::import_status,
        drives::list,
        drives::show,
        drives::down,
        drives::up,
        drives::reset,
        drives::reset_status,
        drives::clean,
        drives::clean_status,
        vault::cleaning,
        super::health,
        metrics::render,
        document,
    ),
    modifiers(&BearerAuth, &CommonAnswers),
    security(("token" = [])),
    tags(
        (name = "jobs", description = "submit and follow jobs"),
        (name = "catalog", description = "what is on tape, and where"),
        (name = "library", description = "drives, slots, cartridges and queues"),
        (name = "objects", description = "objects streamed in and out, for clients without a shared filesystem"),
        (name = "service", description = "health, metrics and this document"),
    )
)]
pub struct ApiDoc;

/// Declares the bearer token every route but /healthz and /openapi.json needs.
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "token",
            SecurityScheme::Http(
                Http::builder()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "an API token, `reel_<id>.<secret>`, from `reel token create`",
                    ))
                    .build(),
            ),
        );
    }
}

/// This document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "service",
    responses((status = 200, description = "the OpenAPI document", content_type = "application/json"))
)]
pub(super) async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

/// Open routes need no token; every other route may also answer what the layers in front of
/// every handler answer: 401 (no valid token), 403 (scope), 408 (too slow), 413 (body too
/// large, where there is a body), 429 (rate), 431 (headers too large), 503 (store down).
struct CommonAnswers;

impl utoipa::Modify for CommonAnswers {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{
            ContentBuilder, Ref, ResponseBuilder, security::SecurityRequirement,
        };
        let answer = |what: &str| {
            ResponseBuilder::new()
                .description(what)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build()
        };
        for (path, item) in doc.paths.paths.iter_mut() {
            let open = matches!(path.as_str(), "/healthz" | "/openapi.json");
            for op in [
                item.get.as_mut(),
                item.put.as_mut(),
                item.post.as_mut(),
                item.delete.as_mut(),
            ]
            .into_iter()
            .flatten()
            {
                let mut common = vec![
                    ("408", "the request was not answered in time"),
                    ("431", "request headers too large"),
                ];
                if open {
                    op.security = Some(vec![SecurityRequirement::default()]);
                } else {
                    common.extend([
                        (
                            "401",
                            "no valid API token (missing, unknown, wrong or revoked)",
                        ),
                        (
                            "403",
                            "the token lacks the scope, root or key prefix this needs",
                        ),
                        ("429", "the token made too many requests (Retry-After)"),
                        ("503", "the store is unreachable or cannot take writes"),
                    ]);
                }
                if op.request_body.is_some() {
                    common.push(("413", "the body is too large"));
                }
                for (code, what) in common {
                    op.responses
                        .responses
                        .entry(code.to_string())
                        .or_insert_with(|| answer(what).into());
                }
            }
        }
    }
}
