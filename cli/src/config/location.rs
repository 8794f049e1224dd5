//! Maps field paths (`spec.hosts[2].role`) to line numbers in the YAML text.
//!
//! serde gives a location only for errors it raises itself; semantic checks run on the parsed structs,
//! which have forgotten where they came from. Block-style YAML (what people write in cluster.yaml) is
//! indentation-structured, so a line scanner that tracks the key/index stack is enough. For flow style
//! (`{a: 1}`, `[x, y]`) the scanner knows only the enclosing key, and lookups fall back to the nearest
//! ancestor it saw.

use std::collections::HashMap;

#[derive(Debug, Default)]
pub struct LineIndex {
    lines: HashMap<String, usize>,
}

#[derive(Debug)]
enum Seg {
    Key(String),
    Index(usize),
}

#[derive(Debug)]
struct Frame {
    indent: usize,
    seg: Seg,
    /// Number of `- ` items seen directly below this frame.
    items: usize,
}

impl LineIndex {
    pub fn new(text: &str) -> Self {
        let mut index = LineIndex::default();
        let mut stack: Vec<Frame> = Vec::new();
        // Indent of a key whose value is a block scalar (`|`, `>`): deeper lines are text, not keys.
        let mut block_scalar: Option<usize> = None;
        for (i, raw) in text.lines().enumerate() {
            let line_no = i + 1;
            let content = strip_comment(raw);
            let trimmed = content.trim_start();
            if trimmed.is_empty() {
                continue;
            }
            let mut indent = content.len() - trimmed.len();
            if let Some(bs) = block_scalar {
                if indent > bs {
                    continue;
                }
                block_scalar = None;
            }
            if indent == 0 && (trimmed.starts_with("---") || trimmed.starts_with("...")) {
                stack.clear();
                continue;
            }
            let mut rest = trimmed;
            // Sequence items, possibly nested on one line (`- - x`).
            while rest == "-" || rest.starts_with("- ") {
                while stack.last().is_some_and(|f| {
                    f.indent > indent || (f.indent == indent && matches!(f.seg, Seg::Index(_)))
                }) {
                    stack.pop();
                }
                let idx = match stack.last_mut() {
                    Some(parent) => {
                        parent.items += 1;
                        parent.items - 1
                    }
                    None => 0,
                };
                stack.push(Frame {
                    indent,
                    seg: Seg::Index(idx),
                    items: 0,
                });
                index.record(&stack, line_no);
                let after = rest[1..].trim_start();
                indent += rest.len() - after.len();
                rest = after;
                if rest.is_empty() {
                    break;
                }
            }
            let Some((key, value)) = split_key(rest) else {
                continue;
            };
            while stack.last().is_some_and(|f| f.indent >= indent) {
                stack.pop();
            }
            stack.push(Frame {
                indent,
                seg: Seg::Key(key),
                items: 0,
            });
            index.record(&stack, line_no);
            let v = value.trim();
            if v.starts_with('|') || v.starts_with('>') {
                block_scalar = Some(indent);
            }
        }
        index
    }

    fn record(&mut self, stack: &[Frame], line: usize) {
        self.lines.entry(render(stack)).or_insert(line);
    }

    /// Line of `path`, or of its nearest ancestor that appears in the text.
    pub fn line_of(&self, path: &str) -> Option<usize> {
        let mut p = path;
        loop {
            if let Some(l) = self.lines.get(p) {
                return Some(*l);
            }
            let cut = p.rfind(['.', '['])?;
            p = &p[..cut];
        }
    }
}

fn render(stack: &[Frame]) -> String {
    let mut s = String::new();
    for f in stack {
        match &f.seg {
            Seg::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// `key: value` or `key:` (key possibly quoted) → (key, value); anything else → None.
fn split_key(s: &str) -> Option<(String, &str)> {
    if let Some(q) = s.chars().next().filter(|c| *c == '"' || *c == '\'') {
        let end = s[1..].find(q)? + 1;
        let after = &s[end + 1..];
        let value = after.strip_prefix(':')?;
        if !(value.is_empty() || value.starts_with(' ')) {
            return None;
        }
        return Some((s[1..end].to_string(), value));
    }
    if s.starts_with(['{', '[', '&', '*', '!', '|', '>']) {
        return None;
    }
    let pos = s
        .find(": ")
        .or_else(|| s.ends_with(':').then(|| s.len() - 1))?;
    Some((s[..pos].trim_end().to_string(), &s[pos + 1..]))
}

/// Drops a `#` comment that is not inside quotes.
fn strip_comment(line: &str) -> &str {
    let mut quote: Option<char> = None;
    let mut prev_space = true;
    for (i, c) in line.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c == '#' && prev_space => return &line[..i],
            None => {}
        }
        prev_space = c.is_whitespace();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "\
apiVersion: kiln.dev/v1alpha1   # comment
kind: Cluster
metadata:
  name: demo
spec:
  hosts:
  - name: a
    address: 10.0.0.1
    role: controller
    labels: {zone: x}
  -   name: b   # odd indent
      address: \"10.0.0.2\"
      ssh:
        user: kiln
  - name: c
    role: worker
    note: |
      name: not-a-key
  networking:
    podCIDR: 10.244.0.0/16
";

    #[test]
    fn finds_nested_keys_and_items() {
        let idx = LineIndex::new(DOC);
        assert_eq!(idx.line_of("metadata.name"), Some(4));
        assert_eq!(idx.line_of("spec.hosts"), Some(6));
        assert_eq!(idx.line_of("spec.hosts[0]"), Some(7));
        assert_eq!(idx.line_of("spec.hosts[0].role"), Some(9));
        assert_eq!(idx.line_of("spec.hosts[1].name"), Some(11));
        assert_eq!(idx.line_of("spec.hosts[1].address"), Some(12));
        assert_eq!(idx.line_of("spec.hosts[1].ssh.user"), Some(14));
        assert_eq!(idx.line_of("spec.hosts[2].role"), Some(16));
        assert_eq!(idx.line_of("spec.networking.podCIDR"), Some(20));
    }

    #[test]
    fn falls_back_to_ancestor() {
        let idx = LineIndex::new(DOC);
        // flow mapping: only the enclosing key is known
        assert_eq!(idx.line_of("spec.hosts[0].labels.zone"), Some(10));
        // absent field: the host item
        assert_eq!(idx.line_of("spec.hosts[2].address"), Some(15));
        // block scalar contents are not keys
        assert_eq!(idx.line_of("spec.hosts[2].note.name"), Some(17));
        assert_eq!(idx.line_of("nothing.here"), None);
    }

    #[test]
    fn sequence_at_deeper_indent() {
        let idx =
            LineIndex::new("spec:\n  hosts:\n    - name: a\n    - name: b\n      role: worker\n");
        assert_eq!(idx.line_of("spec.hosts[1].role"), Some(5));
        assert_eq!(idx.line_of("spec.hosts[0].name"), Some(3));
    }
}
