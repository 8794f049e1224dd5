//! A set of completion indexes as an Indexed Job's status spells it: sorted, with runs collapsed
//! (`"0,2-4,7"`), for status.completedIndexes and status.failedIndexes.

use std::fmt;

/// Sorted, disjoint, inclusive intervals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Indexes(Vec<(i32, i32)>);

impl Indexes {
    /// Parses upstream's format, dropping what is malformed or outside `0..completions` (a
    /// completions decrease of an elastic Job leaves such entries behind).
    pub fn parse(s: &str, completions: i32) -> Indexes {
        let mut out = Indexes::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => (a.parse::<i32>(), b.parse::<i32>()),
                None => (part.parse::<i32>(), part.parse::<i32>()),
            };
            if let (Ok(lo), Ok(hi)) = (lo, hi) {
                for i in lo.max(0)..=hi.min(completions - 1) {
                    out.insert(i);
                }
            }
        }
        out
    }

    pub fn contains(&self, i: i32) -> bool {
        self.0.iter().any(|&(lo, hi)| lo <= i && i <= hi)
    }

    pub fn total(&self) -> i32 {
        self.0.iter().map(|&(lo, hi)| hi - lo + 1).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn insert(&mut self, i: i32) {
        if self.contains(i) {
            return;
        }
        let pos = self.0.partition_point(|&(lo, _)| lo < i);
        self.0.insert(pos, (i, i));
        // Merge with the neighbours the new index touches.
        if pos + 1 < self.0.len() && self.0[pos + 1].0 == i + 1 {
            self.0[pos].1 = self.0[pos + 1].1;
            self.0.remove(pos + 1);
        }
        if pos > 0 && self.0[pos - 1].1 == i - 1 {
            self.0[pos - 1].1 = self.0[pos].1;
            self.0.remove(pos);
        }
    }

    /// Every index, ascending.
    pub fn iter(&self) -> impl Iterator<Item = i32> + '_ {
        self.0.iter().flat_map(|&(lo, hi)| lo..=hi)
    }
}

impl fmt::Display for Indexes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|&(lo, hi)| {
                if lo == hi {
                    lo.to_string()
                } else {
                    format!("{lo}-{hi}")
                }
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_runs() {
        let ix = Indexes::parse("0,2-4,7", 10);
        assert_eq!(ix.to_string(), "0,2-4,7");
        assert_eq!(ix.total(), 5);
        assert!(ix.contains(3) && !ix.contains(5));
        assert_eq!(Indexes::parse("1-3,x,9", 3).to_string(), "1-2");
        assert_eq!(Indexes::parse("", 3).total(), 0);
    }

    #[test]
    fn insert_merges_neighbours() {
        let mut ix = Indexes::default();
        for i in [5, 1, 3, 2, 4, 0, 9] {
            ix.insert(i);
        }
        assert_eq!(ix.to_string(), "0-5,9");
        ix.insert(3);
        assert_eq!(ix.iter().collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5, 9]);
    }
}
