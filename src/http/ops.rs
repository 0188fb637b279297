//! Operations routes: liveness, readiness, the OpenAPI document, and the problem type pages.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use std::sync::Arc;

use super::error::{ApiError, Problem, ProblemType};
use super::responses::problem_responses;
use crate::fleet::Fleet;
use crate::locks::{LockLimits, Locks, StreamedLocks, Watches};
use crate::metrics::{Gauges, Metrics};
use crate::redis::{BackendError, Redis};

/// A health answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    #[schema(example = "ok")]
    status: &'static str,
}

/// Why `/readyz` is not ready for a format: the data format in use on
/// Redis is newer than this instance writes.
#[derive(Debug, Serialize, ToSchema)]
pub struct FormatNotReady {
    #[schema(example = "format")]
    status: &'static str,
    #[schema(example = 2)]
    format_in_use: u32,
    /// The highest format this instance writes.
    #[schema(example = 1)]
    writes: u32,
}

problem_responses!(
    /// A slug with no page.
    NoSuchProblem:
        NotFound,
);

/// Liveness: 200 while the process runs.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "The process runs", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// Readiness: 200 when Redis answers PING and the data format in use is
/// one this instance writes; else 503: `backend-unavailable`, or
/// `{"status": "format", ...}` naming both formats.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses(
        (status = 200, description = "Redis answers", body = Health),
        (status = 503, description = "`backend-unavailable`: Redis does not answer (a problem document); or, \
            as `application/json` `{\"status\": \"format\"}`, the data format in use is one this \
            instance does not write: it grants nothing",
            content(
                (Problem = "application/problem+json"),
                (FormatNotReady = "application/json"),
            )),
    ))]
pub async fn readyz(
    State(redis): State<Redis>,
    State(fleet): State<Fleet>,
) -> Result<Response, ApiError> {
    match fleet.admits().await {
        Err(BackendError::Unwritable(unwritable)) => {
            let body = FormatNotReady {
                status: "format",
                format_in_use: unwritable.format_in_use,
                writes: unwritable.writes,
            };
            return Ok((StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response());
        }
        Err(err) => return Err(err.into()),
        Ok(()) => {}
    }
    redis.ping().await?;
    Ok(Json(Health { status: "ready" }).into_response())
}

/// Prometheus metrics: requests by route and status, lock and sale outcomes,
/// wait times, current waiters, rate-limit refusals, Redis commands and errors.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text exposition format", content_type = "text/plain")))]
pub async fn metrics(
    State(metrics): State<Arc<Metrics>>,
    State(locks): State<Locks>,
    State(streamed): State<StreamedLocks>,
    State(watches): State<Watches>,
) -> impl IntoResponse {
    let gauges = Gauges {
        waiters: locks.waiters(),
        streamed_locks: streamed.held(),
        watchers: watches.open(),
        queued: locks.queued(),
    };
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        metrics.render(gauges),
    )
}

/// The OpenAPI document of this API, with this gateway's bounds on leases
/// and waits (with the default settings, what `openapi/openapi.json` holds).
#[utoipa::path(get, path = "/openapi.json", tag = "operations",
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json")))]
pub async fn openapi_document(State(limits): State<LockLimits>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        super::openapi_json_for(limits),
    )
}

/// A short page on one problem type, the target of a problem's `type`.
#[utoipa::path(get, path = "/problems/{slug}", tag = "operations",
    params(("slug" = String, Path, description = "A problem slug, such as lock-held")),
    responses(
        (status = 200, description = "What the problem means", content_type = "text/plain"),
        NoSuchProblem,
    ))]
pub async fn problem_page(Path(slug): Path<String>) -> Result<impl IntoResponse, ApiError> {
    let kind = ProblemType::from_slug(&slug)
        .ok_or_else(|| ApiError::RouteNotFound(format!("/problems/{slug}")))?;
    let info = kind.info();
    let page = format!(
        "{slug}: {title} ({status})\n\n{about}\n",
        slug = info.slug,
        title = info.title,
        status = info.status,
        about = info.about,
    );
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], page))
}
