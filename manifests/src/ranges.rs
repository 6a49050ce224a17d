//! Role group entries: plain host names or ranges such as `node[1:3]` (`node1`, `node2`, `node3`).

use thiserror::Error;

/// A role group entry that is not a valid name or range.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("`{entry}` is not a host name or a range like `node[1:3]`: {reason}")]
pub struct RangeError {
    /// The entry as written.
    pub entry: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Expands one role group entry into host names. `node[1:3]` → `node1 node2 node3`;
/// `node[08:10]` keeps the zero padding (`node08 node09 node10`); `a[1:2]-x` keeps the suffix.
pub fn expand(entry: &str) -> Result<Vec<String>, RangeError> {
    let err = |reason| RangeError {
        entry: entry.to_owned(),
        reason,
    };
    let Some(open) = entry.find('[') else {
        if entry.contains(']') {
            return Err(err("`]` without `[`"));
        }
        return Ok(vec![entry.to_owned()]);
    };
    let close = entry[open..]
        .find(']')
        .map(|i| open + i)
        .ok_or_else(|| err("`[` without `]`"))?;
    let (prefix, inner, suffix) = (&entry[..open], &entry[open + 1..close], &entry[close + 1..]);
    if suffix.contains('[') {
        return Err(err("only one range per entry is supported"));
    }
    let (lo, hi) = inner
        .split_once(':')
        .ok_or_else(|| err("the range needs the form `[first:last]`"))?;
    let first: u32 = lo
        .parse()
        .map_err(|_| err("the range start is not a number"))?;
    let last: u32 = hi
        .parse()
        .map_err(|_| err("the range end is not a number"))?;
    if first > last {
        return Err(err("the range start is greater than its end"));
    }
    if last - first >= 10_000 {
        return Err(err("the range has more than 10000 hosts"));
    }
    let width = if lo.len() > 1 && lo.starts_with('0') {
        lo.len()
    } else {
        0
    };
    Ok((first..=last)
        .map(|n| format!("{prefix}{n:0width$}{suffix}"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::expand;

    #[test]
    fn plain_names_and_ranges() {
        assert_eq!(expand("master").unwrap_or_default(), vec!["master"]);
        assert_eq!(
            expand("node[1:3]").unwrap_or_default(),
            vec!["node1", "node2", "node3"]
        );
        assert_eq!(
            expand("n[08:10]-x").unwrap_or_default(),
            vec!["n08-x", "n09-x", "n10-x"]
        );
    }

    #[test]
    fn bad_ranges_name_the_problem() {
        for (entry, reason) in [
            ("node[3:1]", "greater than its end"),
            ("node[1:3", "without `]`"),
            ("node[a:3]", "start is not a number"),
            ("node[1-3]", "form `[first:last]`"),
            ("node1]", "without `[`"),
        ] {
            let e = expand(entry).expect_err(entry);
            assert!(e.to_string().contains(reason), "{entry}: {e}");
            assert!(e.to_string().contains(entry), "{entry}: {e}");
        }
    }
}
