//! The OpenAPI document, derived from the handlers' `#[utoipa::path]` annotations.

use axum::response::Json;
use utoipa::OpenApi;

use super::{catalog, jobs, library, metrics, objects};

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
        jobs::list,
        jobs::show,
        jobs::cancel,
        jobs::retry,
        catalog::list,
        catalog::find,
        objects::put_object,
        objects::stage_object,
        objects::get_object,
        library::show,
        super::health,
        metrics::render,
        document,
    ),
    modifiers(&BearerAuth),
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
