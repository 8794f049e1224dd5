//! `test-webserver`: serves the container's filesystem over HTTP (port 80), as Go's `http.FileServer`
//! does: a file's bytes, a directory's `index.html` or its listing, 404 otherwise. Probe tests point
//! at `/`, which is always there.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use axum::Router;
use clap::Args;
use http::{header, HeaderValue, StatusCode, Uri};

use crate::server::{self, ServeError};

#[derive(Debug, Args)]
pub struct TestWebserverArgs {
    /// Port number.
    #[arg(long, default_value_t = 80)]
    pub port: u16,
}

/// The headers upstream adds to every answer (the CORS ones for the API server's proxy).
fn decorate(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("private"));
    h.insert("Access-Control-Allow-Origin", HeaderValue::from_static("*"));
    h.insert(
        "Access-Control-Allow-Credentials",
        HeaderValue::from_static("true"),
    );
    h.insert(
        "Access-Control-Allow-Methods",
        HeaderValue::from_static("GET, POST, OPTIONS"),
    );
    h.insert(
        "Access-Control-Allow-Headers",
        HeaderValue::from_static(
            "DNT,X-Mx-ReqToken,Keep-Alive,User-Agent,X-Requested-With,Cache-Control,Content-Type",
        ),
    );
    r
}

/// The file under `root` a URL path names; `..` cannot climb out (Go cleans the path the same way).
fn resolve(root: &Path, url_path: &str) -> PathBuf {
    let mut p = root.to_path_buf();
    for c in Path::new(url_path).components() {
        match c {
            Component::Normal(n) => p.push(n),
            Component::ParentDir if p != root => {
                p.pop();
            }
            _ => {}
        }
    }
    p
}

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()) {
        Some("html" | "htm") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("json") => "application/json",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("svg") => "image/svg+xml",
        _ => "text/plain; charset=utf-8",
    }
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}

fn moved(to: String) -> Response {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::MOVED_PERMANENTLY;
    if let Ok(v) = HeaderValue::from_str(&to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "404 page not found\n").into_response()
}

async fn file_or_dir(root: &Path, url_path: &str) -> Response {
    // Go redirects …/index.html to …/ and directories to their slash form.
    if let Some(dir) = url_path.strip_suffix("/index.html") {
        return moved(format!("{dir}/"));
    }
    let path = resolve(root, url_path);
    let meta = match tokio::fs::metadata(&path).await {
        Ok(m) => m,
        Err(_) => return not_found(),
    };
    if meta.is_dir() {
        if !url_path.ends_with('/') {
            let base = url_path.rsplit('/').next().unwrap_or("");
            return moved(format!("{base}/"));
        }
        let index = path.join("index.html");
        if let Ok(bytes) = tokio::fs::read(&index).await {
            return ([(header::CONTENT_TYPE, content_type(&index))], bytes).into_response();
        }
        let mut names = Vec::new();
        if let Ok(mut rd) = tokio::fs::read_dir(&path).await {
            while let Ok(Some(e)) = rd.next_entry().await {
                let mut name = e.file_name().to_string_lossy().into_owned();
                if e.file_type().await.map(|t| t.is_dir()).unwrap_or(false) {
                    name.push('/');
                }
                names.push(name);
            }
        }
        names.sort();
        let mut body = String::from(
            "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n",
        );
        for n in names {
            body.push_str(&format!(
                "<a href=\"{}\">{}</a>\n",
                html_escape(&n),
                html_escape(&n)
            ));
        }
        body.push_str("</pre>\n");
        return ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response();
    }
    match tokio::fs::read(&path).await {
        Ok(bytes) => ([(header::CONTENT_TYPE, content_type(&path))], bytes).into_response(),
        Err(_) => (StatusCode::FORBIDDEN, "403 Forbidden\n").into_response(),
    }
}

pub fn router(root: PathBuf) -> Router {
    let root = Arc::new(root);
    Router::new().fallback(move |uri: Uri| {
        let root = root.clone();
        async move { decorate(file_or_dir(&root, uri.path()).await) }
    })
}

pub async fn run(args: TestWebserverArgs) -> Result<i32, ServeError> {
    let l = server::bind_tcp(args.port).await?;
    server::serve(l, None, router(PathBuf::from("/")), std::future::pending()).await;
    Ok(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{get, spawn_router};

    #[tokio::test]
    async fn serves_files_listings_and_404s() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "hello").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let addr = spawn_router(router(dir.path().to_path_buf())).await;

        let (status, headers, body) = get(addr, "/a.txt").await;
        assert_eq!((status, body.as_str()), (200, "hello"));
        assert_eq!(headers.get("access-control-allow-origin").unwrap(), "*");
        assert_eq!(headers.get("cache-control").unwrap(), "private");

        let (status, _, body) = get(addr, "/").await;
        assert_eq!(status, 200);
        assert!(body.contains("<a href=\"a.txt\">a.txt</a>"), "{body}");
        assert!(body.contains("<a href=\"sub/\">sub/</a>"), "{body}");

        let (status, headers, _) = get(addr, "/sub").await;
        assert_eq!(status, 301);
        assert_eq!(headers.get("location").unwrap(), "sub/");

        let (status, _, body) = get(addr, "/missing").await;
        assert_eq!((status, body.as_str()), (404, "404 page not found\n"));

        let (_, _, body) = get(addr, "/../../a.txt").await;
        assert_eq!(body, "hello");
    }
}
