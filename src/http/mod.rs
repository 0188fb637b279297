//! The API surface: routes, extractors, problem answers, and the OpenAPI document built from the same routes.

mod audit;
mod auth;
mod batch;
mod buyer;
mod console;
mod error;
mod extract;
mod fleet;
mod grant;
mod lock_status;
mod locks;
mod ops;
mod problems;
mod responses;
mod schema;
mod seckill;
mod sessions;
mod state;
mod streamed;
mod watch;

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use axum::Router;
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_swagger_ui::SwaggerUi;

use error::Problem;

use crate::locks::LockLimits;
use crate::sync::lock;
use schema::{Bounds, IdempotencyKeyText, LockKeyText, NameText, SessionIdText, TokenText};

pub use audit::record as audit;
pub use auth::{AdminToken, ApiKeys, ClientCertificate, Permissions};
pub use buyer::{BuyerKey, BuyerTokens};
pub use error::{ApiError, FailureCause, PROBLEM_JSON};
pub use extract::TrustedProxies;
pub use state::{AppState, RouteDomains, RouteSettings};
pub use streamed::StreamKeepAlive;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "lockgate",
        description = "Distributed locks on Redis over plain HTTP: acquire (try or wait in a \
            fair queue), release by owner token, renew, inspect, watch, revoke; re-entry, \
            shared and counting locks, public values and monotonic fencing tokens. \
            Every error is application/problem+json with a stable slug in `type`; \
            every response carries X-Instance-Id. Swagger UI is served at /docs.",
        license(name = "MIT"),
    ),
    components(schemas(
        Problem, LockKeyText, TokenText, SessionIdText, NameText, IdempotencyKeyText,
        streamed::RenewedEvent, streamed::ReleasedEvent, streamed::LostEvent, streamed::QueuedEvent,
        lock_status::FreeLock, watch::AcquiredEvent, watch::ValueEvent, watch::EndedEvent,
        watch::ModeEvent, watch::DelayedEvent,
        sessions::SessionRenewedEvent, sessions::SessionEndedEvent,
    )),
    modifiers(&SecuritySchemes),
    tags(
        (name = "locks", description = "Named locks with leases, owner tokens and fencing tokens"),
        (name = "sessions", description = "One liveness lease for many locks: kept alive through any \
            instance; when it ends, its locks end with it (with its lock-delay, when it expired)"),
        (name = "seckill", description = "A flash sale that cannot oversell: Lua-atomic purchases under the \
            per-user lock, rate-limited per user across instances"),
        (name = "operations", description = "Health, readiness and the API description"),
    )
)]
struct ApiDoc;

/// Declares the bearer schemes: `api_key` for the lock routes (when keys
/// are configured), `admin` for sale administration, and `buyer` (a JWT)
/// for purchases when buyer tokens are configured.
struct SecuritySchemes;

impl utoipa::Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        for name in ["api_key", "admin"] {
            components.add_security_scheme(
                name,
                SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
            );
        }
        components.add_security_scheme(
            "buyer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
    }
}

/// Every documented route, feeding both the server and the OpenAPI document.
fn api_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(locks::acquire, lock_status::list))
        .routes(routes!(locks::release, lock_status::inspect))
        .routes(routes!(locks::extend))
        .routes(routes!(locks::set_value))
        .routes(routes!(batch::acquire_batch))
        .routes(routes!(batch::change_mode))
        .routes(routes!(sessions::open))
        .routes(routes!(sessions::keep, sessions::inspect, sessions::delete))
        .routes(routes!(watch::events))
        .routes(routes!(seckill::sales))
        .routes(routes!(seckill::reset_sale, seckill::sale))
        .routes(routes!(seckill::purchase, seckill::orders))
        .routes(routes!(ops::healthz))
        .routes(routes!(ops::readyz))
        .routes(routes!(fleet::version))
        .routes(routes!(fleet::instances))
        .routes(routes!(ops::metrics))
        .routes(routes!(ops::openapi_document))
        .routes(routes!(ops::problem_page))
}

/// The OpenAPI document, as `lockgate openapi` prints it (and
/// `openapi/openapi.json` holds it): the bounds of the default settings.
pub fn openapi_json() -> &'static str {
    openapi_json_for(LockLimits::default())
}

/// The OpenAPI document with the lease and wait bounds of `limits`, as a
/// gateway with those settings serves it at `/openapi.json` (so generated
/// clients and fuzzers send what it accepts). Made once per set of limits.
pub fn openapi_json_for(limits: LockLimits) -> &'static str {
    static DOCUMENTS: LazyLock<Mutex<HashMap<LockLimits, &'static str>>> =
        LazyLock::new(Mutex::default);
    let mut documents = lock(&DOCUMENTS);
    documents.entry(limits).or_insert_with(|| {
        let mut document = api_routes().into_openapi();
        // After the routes have added their schemas, which it bounds.
        utoipa::Modify::modify(&Bounds(limits), &mut document);
        let mut text = schema::refined(&document);
        text.push('\n');
        Box::leak(text.into_boxed_str())
    })
}

/// The API: every route, Swagger UI, and the answers for unknown paths and
/// methods. The transport (the `server` module) adds the layer every request
/// passes through and the state.
pub fn api() -> Router<AppState> {
    let (routes, _) = api_routes().split_for_parts();
    // A lock named `batch` keeps its routes beside `POST /locks/batch`.
    let routes = routes.route(
        "/locks/batch",
        axum::routing::get(lock_status::inspect).delete(locks::release),
    );
    let docs = SwaggerUi::new("/docs").config(
        utoipa_swagger_ui::Config::from("/openapi.json")
            // Swagger UI would otherwise send the document to an online validator.
            .validator_url("none"),
    );
    routes
        .merge(docs)
        .merge(console::routes())
        .fallback(route_not_found)
        .method_not_allowed_fallback(method_not_allowed)
}

async fn route_not_found(uri: Uri) -> Response {
    ApiError::RouteNotFound(uri.path().to_owned()).into_response()
}

async fn method_not_allowed(uri: Uri) -> Response {
    ApiError::MethodNotAllowed(uri.path().to_owned()).into_response()
}
