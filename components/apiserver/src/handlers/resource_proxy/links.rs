//! Links a backend hands out (a `Location` header, URLs in an HTML page) made to point back
//! through the proxy, as upstream's proxy transport rewrites them: an absolute path on the
//! backend's own host gets the request's prefix (`/api/v1/namespaces/ns/pods/p/proxy`) in front.

use super::location::join;

/// A URL split as Go's url.Parse splits it; the path stays in its escaped form.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Url<'a> {
    scheme: &'a str,
    /// `Some` when the URL has an authority (`//host`), possibly empty.
    host: Option<&'a str>,
    path: String,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
    /// `mailto:x`, `javascript:…`: a scheme without `//` and without a rooted path.
    opaque: bool,
}

fn valid_scheme(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

fn valid_escapes(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            if i + 2 >= b.len() || !b[i + 1].is_ascii_hexdigit() || !b[i + 2].is_ascii_hexdigit() {
                return false;
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    true
}

/// None where url.Parse fails: control characters, bad escapes, a colon before any slash that
/// does not start a valid scheme.
fn parse(raw: &str) -> Option<Url<'_>> {
    if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return None;
    }
    let (rest, fragment) = match raw.split_once('#') {
        Some((r, f)) => (r, Some(f)),
        None => (raw, None),
    };
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    let mut scheme = "";
    let mut rest = rest;
    if let Some(colon) = rest.find(':') {
        let before = &rest[..colon];
        if !before.contains('/') {
            if colon == 0 || !valid_scheme(before) {
                return None;
            }
            scheme = before;
            rest = &rest[colon + 1..];
        }
    }
    let mut host = None;
    if rest.starts_with("//") && (!scheme.is_empty() || !rest.starts_with("///")) {
        let after = &rest[2..];
        let end = after.find('/').unwrap_or(after.len());
        let authority = &after[..end];
        // Userinfo is kept out of the comparison; upstream compares URL.Host only.
        host = Some(authority.rsplit_once('@').map_or(authority, |(_, h)| h));
        rest = &after[end..];
    }
    if !valid_escapes(rest) {
        return None;
    }
    let opaque = !scheme.is_empty() && host.is_none() && !rest.starts_with('/');
    Some(Url {
        scheme,
        host,
        path: rest.to_string(),
        query,
        fragment,
        opaque,
    })
}

impl Url<'_> {
    fn render(&self) -> String {
        let mut out = String::new();
        if !self.scheme.is_empty() {
            out.push_str(self.scheme);
            out.push(':');
        }
        if let Some(h) = self
            .host
            .filter(|h| !h.is_empty() || !self.scheme.is_empty())
        {
            out.push_str("//");
            out.push_str(h);
        }
        out.push_str(&self.path);
        if let Some(q) = self.query {
            out.push('?');
            out.push_str(q);
        }
        if let Some(f) = self.fragment {
            out.push('#');
            out.push_str(f);
        }
        out
    }
}

/// Rewrites links found in one backend response.
#[derive(Debug, Clone)]
pub struct Rewriter {
    /// The request path before the backend path (`…/proxy`).
    pub prepend: String,
    /// The backend's `host:port`, as dialled.
    pub backend_host: String,
    /// The Host the client asked the API server under.
    pub request_host: String,
}

impl Rewriter {
    /// The link as the client should follow it; None when it does not parse (then upstream leaves
    /// an HTML attribute alone and fails a Location header).
    pub fn rewrite(&self, link: &str) -> Option<String> {
        let mut url = parse(link)?;
        let other_host = url
            .host
            .is_some_and(|h| !h.is_empty() && h != self.backend_host && h != self.request_host);
        if other_host || url.opaque || !url.path.starts_with('/') {
            return Some(link.to_string());
        }
        // Upstream sets scheme and host to the incoming request URL's, which a server-side
        // request never has: a link to the backend becomes host-relative; one to the API
        // server's own Host keeps its scheme and host.
        if url.host.unwrap_or("") != self.request_host {
            url.scheme = "";
            url.host = None;
        }
        if url.path.starts_with(self.prepend.as_str()) {
            return Some(url.render());
        }
        let trailing = url.path.ends_with('/');
        let mut path = join(&[&self.prepend, &url.path]);
        if trailing {
            path.push('/');
        }
        url.path = path;
        Some(url.render())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewriter() -> Rewriter {
        Rewriter {
            prepend: "/api/v1/namespaces/ns/pods/p:1080/proxy".into(),
            backend_host: "10.244.1.5:1080".into(),
            request_host: "10.250.0.11:6443".into(),
        }
    }

    #[test]
    fn absolute_paths_get_the_proxy_prefix() {
        let r = rewriter();
        assert_eq!(
            r.rewrite("/rewriteme").unwrap(),
            "/api/v1/namespaces/ns/pods/p:1080/proxy/rewriteme"
        );
        assert_eq!(
            r.rewrite("/a/b/?x=1#top").unwrap(),
            "/api/v1/namespaces/ns/pods/p:1080/proxy/a/b/?x=1#top"
        );
        assert_eq!(
            r.rewrite("http://10.244.1.5:1080/login").unwrap(),
            "/api/v1/namespaces/ns/pods/p:1080/proxy/login"
        );
        assert_eq!(
            r.rewrite("https://10.250.0.11:6443/x").unwrap(),
            "https://10.250.0.11:6443/api/v1/namespaces/ns/pods/p:1080/proxy/x"
        );
    }

    #[test]
    fn other_links_stay() {
        let r = rewriter();
        for link in [
            "relative/path",
            "http://example.com/x",
            "mailto:someone@example.com",
            "javascript:void(0)",
            "#frag",
            "/api/v1/namespaces/ns/pods/p:1080/proxy/already",
        ] {
            assert_eq!(r.rewrite(link).unwrap(), link, "{link}");
        }
        assert_eq!(r.rewrite("/bad%zz"), None);
        assert_eq!(r.rewrite("1http://x/"), None);
    }
}
