//! The fleet's routes: this build's version and data formats (`GET /version`), and every live instance (`GET /admin/instances`).

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use super::auth::AdminAccess;
use super::error::ApiError;
use super::responses::problem_responses;
use crate::fleet::Fleet;

/// The data formats a build reads and writes.
#[derive(Debug, Serialize, ToSchema)]
pub struct Formats {
    /// Every format it reads.
    #[schema(example = json!([1]))]
    reads: Vec<u32>,
    /// The highest format it writes (it writes the one in use, when that
    /// is lower).
    #[schema(example = 1)]
    writes: u32,
}

/// A build and the data format in use.
#[derive(Debug, Serialize, ToSchema)]
pub struct VersionView {
    #[schema(example = "0.2.0")]
    version: &'static str,
    formats: Formats,
    /// The data format in use on Redis, as this instance last read it
    /// (null until Redis first answered).
    #[schema(example = 1)]
    format_in_use: Option<u32>,
}

/// This build's version, the data formats it reads and writes, and the one
/// in use.
#[utoipa::path(get, path = "/version", tag = "operations",
    responses((status = 200, description = "The version and formats", body = VersionView)))]
pub async fn version(State(fleet): State<Fleet>) -> Json<VersionView> {
    let info = fleet.version();
    Json(VersionView {
        version: info.version,
        formats: Formats {
            reads: info.reads.to_vec(),
            writes: info.writes,
        },
        format_in_use: info.format_in_use,
    })
}

/// A live instance of the fleet, as its record says.
#[derive(Debug, Serialize, ToSchema)]
pub struct InstanceView {
    /// Its configured id (`X-Instance-Id`).
    #[schema(example = "gw-1:8080")]
    id: String,
    #[schema(example = "0.2.0")]
    version: String,
    formats: Formats,
    /// When it started (Unix ms, its clock).
    started_at_ms: u64,
    /// Where it serves.
    #[schema(example = "10.0.0.7:8080")]
    address: String,
}

/// The live instances.
#[derive(Debug, Serialize, ToSchema)]
pub struct InstanceList {
    instances: Vec<InstanceView>,
}

problem_responses!(
    /// What `GET /admin/instances` can refuse with.
    InstancesProblems:
        Unauthorized, Forbidden, AdministrationDisabled,
);

/// Every live instance on this Redis (admin): id, version, data formats,
/// start time and address, as the fleet's record held them at this
/// instance's last beat (every 2 s). Instances of releases before 0.2.0
/// keep no record and are not listed.
#[utoipa::path(get, path = "/admin/instances", tag = "operations",
    security(("admin" = [])),
    responses(
        (status = 200, description = "The live instances, oldest first", body = InstanceList),
        InstancesProblems,
    ))]
pub async fn instances(
    State(fleet): State<Fleet>,
    _admin: AdminAccess,
) -> Result<Json<InstanceList>, ApiError> {
    let instances = fleet
        .instances()
        .into_iter()
        .map(|instance| InstanceView {
            formats: Formats {
                reads: instance.reads,
                writes: instance.writes[1],
            },
            id: instance.id,
            version: instance.version,
            started_at_ms: instance.started_at_ms,
            address: instance.address,
        })
        .collect();
    Ok(Json(InstanceList { instances }))
}
