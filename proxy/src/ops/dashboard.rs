//! `GET /dashboard`: the operator's dashboard, a page and its script embedded in the binary
//! (nothing fetched from elsewhere, no build step). The page holds no data: it reads the health
//! and admin APIs with the admin key the operator types in (kept in the tab's session storage,
//! sent as a header, never a cookie) and redraws when the event stream says something changed.
//! Its content security policy allows only its own script and the gateway's own APIs.

use crate::edge::errors::{Body, full};
use http::Response;

const PAGE: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/app.js");
const VIEWS: &str = include_str!("dashboard/views.js");
const STYLE: &str = include_str!("dashboard/style.css");
const ICON: &str = include_str!("dashboard/icon.svg");

const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The asset at `path` (`/dashboard`, `/dashboard/`, `/dashboard/app.js`, `/dashboard/views.js`,
/// `/dashboard/style.css`, `/dashboard/icon.svg`).
pub fn asset(path: &str) -> Option<Response<Body>> {
    let (body, kind) = match path {
        "/dashboard" | "/dashboard/" => (PAGE, "text/html; charset=utf-8"),
        "/dashboard/app.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "/dashboard/views.js" => (VIEWS, "text/javascript; charset=utf-8"),
        "/dashboard/style.css" => (STYLE, "text/css; charset=utf-8"),
        "/dashboard/icon.svg" => (ICON, "image/svg+xml"),
        _ => return None,
    };
    Response::builder()
        .status(200)
        .header("content-type", kind)
        .header("content-security-policy", POLICY)
        .header("x-content-type-options", "nosniff")
        .header("referrer-policy", "no-referrer")
        .header("cache-control", "no-cache")
        .body(full(body))
        .ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_page_names_an_icon_the_dashboard_serves() {
        assert!(super::PAGE.contains(r#"<link rel="icon" href="/dashboard/icon.svg""#));
        let icon = super::asset("/dashboard/icon.svg").expect("served");
        assert_eq!(icon.headers().get("content-type").and_then(|v| v.to_str().ok()), Some("image/svg+xml"));
        assert!(super::ICON.starts_with("<svg"));
    }
}
