//! The OpenAPI side of problem answers: each route lists the problem types it can answer, described once, from the catalogue.
//!
//! `problem_responses!(Name: LockHeld, NotOwner, ...)` declares a type that a
//! `#[utoipa::path]` names in its `responses(...)`. Problem types that share
//! a status become one response whose description names each slug with its
//! meaning, so the document says what the problem pages say.

use std::collections::BTreeMap;

use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::{ContentBuilder, Ref, RefOr};

use super::error::{PROBLEM_JSON, ProblemType};

/// Declares a type listing problem types for `#[utoipa::path(responses(...))]`.
macro_rules! problem_responses {
    ($(#[$doc:meta])* $name:ident: $($kind:ident),+ $(,)?) => {
        $(#[$doc])*
        pub struct $name;

        impl utoipa::IntoResponses for $name {
            fn responses() -> std::collections::BTreeMap<
                String,
                utoipa::openapi::RefOr<utoipa::openapi::response::Response>,
            > {
                use $crate::http::error::ProblemType::*;
                $crate::http::responses::documented(&[$($kind),+])
            }
        }
    };
}
pub(crate) use problem_responses;

/// One response per status among `kinds`, each an `application/problem+json`
/// `Problem` whose description names every slug answered with that status.
pub fn documented(kinds: &[ProblemType]) -> BTreeMap<String, RefOr<Response>> {
    let mut by_status: BTreeMap<u16, Vec<String>> = BTreeMap::new();
    for kind in kinds {
        let info = kind.info();
        by_status
            .entry(info.status.as_u16())
            .or_default()
            .push(format!("`{}`: {}", info.slug, info.about));
    }
    by_status
        .into_iter()
        .map(|(status, lines)| {
            let content = ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("Problem")))
                .build();
            let response = ResponseBuilder::new()
                .description(lines.join("\n\n"))
                .content(PROBLEM_JSON, content)
                .build();
            (status.to_string(), RefOr::T(response))
        })
        .collect()
}
