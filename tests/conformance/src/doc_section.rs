//! One `## ` section of docs/conformance.md that a peer suite's tool owns (the Python client's e2e, kube-rs's
//! cluster tests): replaced in place by its tool, and kept when `kiln-conformance` rewrites the page.

/// `doc` with the section under `heading` replaced by `section` (put before the page's first `## ` heading
/// when it has none). A section runs from its heading to the next `## ` heading or the end.
pub fn splice(doc: &str, heading: &str, section: &str) -> String {
    let section = section.trim_end();
    let Some((start, end)) = span(doc, heading) else {
        // New: beside the score, before the page's first `## ` (the conformance entry lists).
        return match doc.find("\n## ") {
            Some(i) => format!("{}{section}\n\n{}", &doc[..i + 1], &doc[i + 1..]),
            None => format!("{}\n\n{section}\n", doc.trim_end()),
        };
    };
    let mut out = doc[..start].to_string();
    out.push_str(section);
    out.push('\n');
    if end < doc.len() {
        out.push('\n');
        out.push_str(&doc[end..]);
    }
    out
}

/// The section under `heading`, if `doc` has one.
pub fn existing<'a>(doc: &'a str, heading: &str) -> Option<&'a str> {
    span(doc, heading).map(|(s, e)| doc[s..e].trim_end())
}

/// Byte range of the section: its heading line to the next `## ` heading (exclusive) or the end.
fn span(doc: &str, heading: &str) -> Option<(usize, usize)> {
    let start = doc.find(&format!("\n{heading}\n"))? + 1;
    let after = &doc[start + heading.len()..];
    let end = after
        .find("\n## ")
        .map_or(doc.len(), |i| start + heading.len() + i + 1);
    Some((start, end))
}
