//! Bad-input cases: one malformed request each, and the problem document it must get.

use reqwest::Method;

use super::{TestApp, assert_problem};

/// One malformed request and the problem it must get.
pub struct Case {
    pub what: &'static str,
    method: Method,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: Option<String>,
    status: u16,
    slug: &'static str,
    field: Option<&'static str>,
}

/// A request of `method` to `path` that must be answered `status` with the
/// problem `slug`.
pub fn case(
    what: &'static str,
    method: Method,
    path: &str,
    status: u16,
    slug: &'static str,
) -> Case {
    Case {
        what,
        method,
        path: path.to_owned(),
        headers: Vec::new(),
        body: None,
        status,
        slug,
        field: None,
    }
}

impl Case {
    /// A body sent as `application/json`.
    pub fn json(mut self, body: impl Into<String>) -> Self {
        self.headers
            .push(("content-type", "application/json".to_owned()));
        self.body = Some(body.into());
        self
    }

    /// A body sent with another content type (an empty one, when it is empty).
    pub fn raw(self, content_type: &str, body: &str) -> Self {
        self.header("content-type", content_type).body(body)
    }

    /// A body sent without a content type.
    pub fn body(mut self, body: &str) -> Self {
        self.body = Some(body.to_owned());
        self
    }

    pub fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.to_owned()));
        self
    }

    /// `Authorization: Bearer <token>`.
    pub fn bearer(self, token: &str) -> Self {
        self.header("authorization", &format!("Bearer {token}"))
    }

    /// The field the problem must name.
    pub fn field(mut self, field: &'static str) -> Self {
        self.field = Some(field);
        self
    }

    /// Sends the request to `app` and checks its answer: the documented
    /// status, never a 5xx, and the problem with its slug and field.
    pub async fn check(self, app: &TestApp) {
        let mut request = app.http.request(self.method.clone(), app.url(&self.path));
        for (name, value) in &self.headers {
            request = request.header(*name, value);
        }
        if let Some(body) = self.body {
            request = request.body(body);
        }
        let response = request.send().await.unwrap();
        assert!(
            !response.status().is_server_error(),
            "{}: {}",
            self.what,
            response.status()
        );
        assert_eq!(response.status().as_u16(), self.status, "{}", self.what);
        let problem = assert_problem(response, self.status, self.slug).await;
        assert_eq!(
            problem["field"].as_str(),
            self.field,
            "{}: {problem}",
            self.what
        );
    }
}
