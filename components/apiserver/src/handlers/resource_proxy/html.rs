//! URLs in a proxied HTML page passed through the link rewriter, as upstream's rewriteHTML does
//! with Go's HTML tokenizer: the start tags that carry URL attributes (`a href`, `img src`, …) are
//! written back as Go's Token.String() writes them (lower-case names, every value double-quoted and
//! escaped) with those attributes rewritten; everything else is copied byte for byte.

/// The tags and attributes upstream rewrites (its atomsToAttrs).
const URL_ATTRIBUTES: &[(&str, &[&str])] = &[
    ("a", &["href"]),
    ("applet", &["codebase"]),
    ("area", &["href"]),
    ("audio", &["src"]),
    ("base", &["href"]),
    ("blockquote", &["cite"]),
    ("body", &["background"]),
    ("button", &["formaction"]),
    ("command", &["icon"]),
    ("del", &["cite"]),
    ("embed", &["src"]),
    ("form", &["action"]),
    ("frame", &["longdesc", "src"]),
    ("head", &["profile"]),
    ("html", &["manifest"]),
    ("iframe", &["longdesc", "src"]),
    ("img", &["longdesc", "src", "usemap"]),
    ("input", &["src", "usemap", "formaction"]),
    ("ins", &["cite"]),
    ("link", &["href"]),
    ("object", &["classid", "codebase", "data", "usemap"]),
    ("q", &["cite"]),
    ("script", &["src"]),
    ("source", &["src"]),
    ("video", &["poster", "src"]),
];

/// Elements whose content is text up to their end tag (the tokenizer's raw tags).
const RAW_TEXT: &[&str] = &[
    "iframe",
    "noembed",
    "noframes",
    "noscript",
    "plaintext",
    "script",
    "style",
    "textarea",
    "title",
    "xmp",
];

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t' | b'\x0c')
}

/// One attribute value: text to escape on output, or an entity kept as written because it is
/// not one decoded here (Go decodes every named entity; re-escaping an unknown one would break it).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Entity(String),
}

#[derive(Debug)]
struct Attribute {
    key: String,
    value: Vec<Piece>,
}

#[derive(Debug)]
struct Tag {
    name: String,
    attributes: Vec<Attribute>,
    self_closing: bool,
    /// Index just past the closing `>`.
    end: usize,
}

fn decode_entity(name: &str) -> Option<char> {
    if let Some(num) = name.strip_prefix('#') {
        let code = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => num.parse().ok()?,
        };
        return char::from_u32(code).filter(|c| *c != '\0');
    }
    Some(match name {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        "nbsp" => '\u{a0}',
        _ => return None,
    })
}

fn unescape(raw: &[u8]) -> Vec<Piece> {
    let text = String::from_utf8_lossy(raw);
    let mut pieces = Vec::new();
    let mut current = String::new();
    let mut rest = text.as_ref();
    while let Some(amp) = rest.find('&') {
        current.push_str(&rest[..amp]);
        let after = &rest[amp + 1..];
        let name_end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '#'))
            .unwrap_or(after.len());
        if after[name_end..].starts_with(';') {
            let name = &after[..name_end];
            match decode_entity(name) {
                Some(c) => current.push(c),
                None => {
                    pieces.push(Piece::Text(std::mem::take(&mut current)));
                    pieces.push(Piece::Entity(format!("&{name};")));
                }
            }
            rest = &after[name_end + 1..];
        } else {
            current.push('&');
            rest = after;
        }
    }
    current.push_str(rest);
    pieces.push(Piece::Text(current));
    pieces.retain(|p| p != &Piece::Text(String::new()));
    pieces
}

fn joined(pieces: &[Piece]) -> String {
    pieces
        .iter()
        .map(|p| match p {
            Piece::Text(t) | Piece::Entity(t) => t.as_str(),
        })
        .collect()
}

/// Go's html escape for attribute values.
fn escape_into(out: &mut Vec<u8>, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.extend_from_slice(b"&amp;"),
            '\'' => out.extend_from_slice(b"&#39;"),
            '<' => out.extend_from_slice(b"&lt;"),
            '>' => out.extend_from_slice(b"&gt;"),
            '"' => out.extend_from_slice(b"&#34;"),
            '\r' => out.extend_from_slice(b"&#13;"),
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
}

/// Reads a start tag from `start` (at `<`); None when the input ends inside it.
fn read_start_tag(input: &[u8], start: usize) -> Option<Tag> {
    let mut i = start + 1;
    let name_start = i;
    while i < input.len() && !is_space(input[i]) && input[i] != b'/' && input[i] != b'>' {
        i += 1;
    }
    let name = String::from_utf8_lossy(&input[name_start..i]).to_ascii_lowercase();
    let mut attributes = Vec::new();
    loop {
        while i < input.len() && is_space(input[i]) {
            i += 1;
        }
        match input.get(i) {
            None => return None,
            Some(b'>') => break,
            Some(b'/') => {
                i += 1;
                continue;
            }
            Some(_) => {}
        }
        // The key: up to a space, `/`, `>` or `=` (a leading `=` belongs to the key).
        let key_start = i;
        while i < input.len() {
            let b = input[i];
            if is_space(b) || b == b'/' || b == b'>' || (b == b'=' && i != key_start) {
                break;
            }
            i += 1;
        }
        let key = String::from_utf8_lossy(&input[key_start..i]).to_ascii_lowercase();
        let mut value: &[u8] = &[];
        let mut j = i;
        while j < input.len() && is_space(input[j]) {
            j += 1;
        }
        if input.get(j) == Some(&b'=') {
            j += 1;
            while j < input.len() && is_space(input[j]) {
                j += 1;
            }
            match input.get(j) {
                None => return None,
                Some(b'>') => {}
                Some(&quote) if quote == b'"' || quote == b'\'' => {
                    let close = input[j + 1..].iter().position(|b| *b == quote)? + j + 1;
                    value = &input[j + 1..close];
                    j = close + 1;
                }
                Some(_) => {
                    let value_start = j;
                    while j < input.len() && !is_space(input[j]) && input[j] != b'>' {
                        j += 1;
                    }
                    value = &input[value_start..j];
                }
            }
            i = j;
        }
        attributes.push(Attribute {
            key,
            value: unescape(value),
        });
    }
    let end = i + 1;
    Some(Tag {
        name,
        attributes,
        self_closing: end >= 2 && input[end - 2] == b'/' && end - 2 > start,
        end,
    })
}

/// Where the content of a raw-text element ends: at `</name` followed by a space, `/` or `>`.
fn raw_text_end(input: &[u8], from: usize, name: &str) -> usize {
    if name == "plaintext" {
        return input.len();
    }
    let mut i = from;
    while let Some(pos) = input[i..].windows(2).position(|w| w == b"</") {
        let at = i + pos;
        let name_end = at + 2 + name.len();
        if name_end <= input.len()
            && input[at + 2..name_end].eq_ignore_ascii_case(name.as_bytes())
            && input
                .get(name_end)
                .is_none_or(|b| is_space(*b) || *b == b'/' || *b == b'>')
        {
            return at;
        }
        i = at + 2;
    }
    input.len()
}

fn find(input: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    input
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| from + p)
}

fn write_tag(
    out: &mut Vec<u8>,
    tag: &Tag,
    urls: &[&str],
    rewrite: &dyn Fn(&str) -> Option<String>,
) {
    out.push(b'<');
    out.extend_from_slice(tag.name.as_bytes());
    for a in &tag.attributes {
        out.push(b' ');
        out.extend_from_slice(a.key.as_bytes());
        out.extend_from_slice(b"=\"");
        let rewritten = urls
            .contains(&a.key.as_str())
            .then(|| rewrite(&joined(&a.value)))
            .flatten();
        match rewritten {
            Some(v) => escape_into(out, &v),
            None => {
                for p in &a.value {
                    match p {
                        Piece::Text(t) => escape_into(out, t),
                        Piece::Entity(e) => out.extend_from_slice(e.as_bytes()),
                    }
                }
            }
        }
        out.push(b'"');
    }
    out.extend_from_slice(if tag.self_closing { b"/>" } else { b">" });
}

/// The page with its URL attributes rewritten.
pub fn rewrite(input: &[u8], rewrite: &dyn Fn(&str) -> Option<String>) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len() + 256);
    let mut i = 0;
    while i < input.len() {
        let Some(lt) = input[i..].iter().position(|b| *b == b'<').map(|p| i + p) else {
            out.extend_from_slice(&input[i..]);
            break;
        };
        out.extend_from_slice(&input[i..lt]);
        let end = match input.get(lt + 1).copied() {
            Some(c) if c.is_ascii_alphabetic() => {
                let Some(tag) = read_start_tag(input, lt) else {
                    out.extend_from_slice(&input[lt..]);
                    break;
                };
                match URL_ATTRIBUTES.iter().find(|(n, _)| *n == tag.name) {
                    Some((_, urls)) => write_tag(&mut out, &tag, urls, rewrite),
                    None => out.extend_from_slice(&input[lt..tag.end]),
                }
                let end = if !tag.self_closing && RAW_TEXT.contains(&tag.name.as_str()) {
                    raw_text_end(input, tag.end, &tag.name)
                } else {
                    tag.end
                };
                out.extend_from_slice(&input[tag.end..end]);
                end
            }
            Some(b'!') if input[lt..].starts_with(b"<!--") => {
                let end = find(input, lt + 2, b"-->").map_or(input.len(), |p| p + 3);
                out.extend_from_slice(&input[lt..end]);
                end
            }
            Some(b'!' | b'?' | b'/') => {
                let end = find(input, lt, b">").map_or(input.len(), |p| p + 1);
                out.extend_from_slice(&input[lt..end]);
                end
            }
            _ => {
                out.push(b'<');
                lt + 1
            }
        };
        i = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(link: &str) -> Option<String> {
        if link.contains("%zz") {
            return None;
        }
        Some(if link.starts_with('/') {
            format!("/proxy{link}")
        } else {
            link.to_string()
        })
    }

    fn run(html: &str) -> String {
        String::from_utf8(rewrite(html.as_bytes(), &prefix)).unwrap()
    }

    #[test]
    fn url_attributes_are_rewritten() {
        assert_eq!(
            run(r#"<a href="/rewriteme">test</a>"#),
            r#"<a href="/proxy/rewriteme">test</a>"#
        );
        assert_eq!(
            run("<IMG SRC=/x.png ALT='a \"b\"'/>"),
            r#"<img src="/proxy/x.png" alt="a &#34;b&#34;"/>"#
        );
        assert_eq!(
            run(r#"<form  action="/post?a=1&amp;b=2" method=post>"#),
            r#"<form action="/proxy/post?a=1&amp;b=2" method="post">"#
        );
    }

    #[test]
    fn everything_else_is_copied() {
        let page = "<!DOCTYPE html>\n<html><div class=x  id='y'>text & more</div><!-- <a href=\"/c\"> -->\n<p>1 < 2</p></html>";
        let out = run(page);
        assert!(out.starts_with("<!DOCTYPE html>\n<html><div class=x  id='y'>text & more</div><!-- <a href=\"/c\"> -->"), "{out}");
        assert!(out.ends_with("<p>1 < 2</p></html>"), "{out}");
    }

    #[test]
    fn raw_text_is_not_tokenized() {
        let page = r#"<script src="/app.js">var s = '<a href="/no">';</script><a href="/yes">"#;
        assert_eq!(
            run(page),
            r#"<script src="/proxy/app.js">var s = '<a href="/no">';</script><a href="/proxy/yes">"#
        );
        assert_eq!(
            run("<title><a href=/t></TITLE>"),
            "<title><a href=/t></TITLE>"
        );
    }

    #[test]
    fn unparsable_urls_and_unknown_entities_stay() {
        assert_eq!(run(r#"<a href="/bad%zz">"#), r#"<a href="/bad%zz">"#);
        assert_eq!(
            run(r#"<a title="&copy; 2024 &lt;x&gt;" disabled>"#),
            r#"<a title="&copy; 2024 &lt;x&gt;" disabled="">"#
        );
    }

    #[test]
    fn a_page_cut_inside_a_tag_is_copied_as_is() {
        assert_eq!(run("ok <a href=\"/x"), "ok <a href=\"/x");
    }
}
