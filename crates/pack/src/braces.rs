//! Brace patterns (`shard-{000000..000099}.tar`, `{a,b}`): expanded as shells and WebDataset do.

/// The most names one brace pattern may expand to (ten billion samples at 10,000 a shard).
const MAX_EXPANSION: usize = 1_000_000;

/// Expands `{a..b}` ranges (zero-padded to the wider end's width when either end has a leading
/// zero, as bash and Python's braceexpand do: `{1..03}` is 01 02 03) and `{x,y}`
/// alternatives, which may be ranges (`{0..3,5..9}`), left to right, as shells and WebDataset do.
pub fn expand_braces(pattern: &str) -> Result<Vec<String>, String> {
    let Some(open) = pattern.find('{') else {
        if pattern.contains('}') {
            return Err(format!("unmatched '}}' in {pattern:?}"));
        }
        return Ok(vec![pattern.to_string()]);
    };
    let close = pattern[open..]
        .find('}')
        .map(|i| open + i)
        .ok_or_else(|| format!("unmatched '{{' in {pattern:?}"))?;
    let (head, tail) = (&pattern[..open], &pattern[close + 1..]);
    let body = &pattern[open + 1..close];
    if !body.contains("..") && !body.contains(',') {
        return Err(format!(
            "{{{body}}} in {pattern:?} is no range (a..b) or list (x,y)"
        ));
    }
    // Each item of a list is a name or a range: `{0000..0003,0005..0020}` names two runs.
    let mut items: Vec<String> = Vec::new();
    for item in body.split(',') {
        let Some((a, b)) = item.split_once("..") else {
            items.push(item.to_string());
            continue;
        };
        let bad = |what: &str, v: &str| format!("bad range {what} {v:?} in {pattern:?}");
        let lo = a.parse::<u64>().map_err(|_| bad("start", a))?;
        let hi = b.parse::<u64>().map_err(|_| bad("end", b))?;
        if hi < lo {
            return Err(format!("empty range {{{item}}} in {pattern:?}"));
        }
        if (hi - lo).saturating_add(items.len() as u64) >= MAX_EXPANSION as u64 {
            return Err(format!(
                "{{{body}}} names more than the {MAX_EXPANSION} files one pattern may"
            ));
        }
        let padded = |v: &str| v.len() > 1 && v.starts_with('0');
        let width = (padded(a) || padded(b)).then(|| a.len().max(b.len()));
        let width = width.unwrap_or(0);
        items.extend((lo..=hi).map(|i| format!("{i:0width$}")));
    }
    let rest = expand_braces(tail)?;
    if items.len().saturating_mul(rest.len()) > MAX_EXPANSION {
        return Err(format!(
            "{pattern:?} names {} files, more than the {MAX_EXPANSION} one pattern may",
            items.len().saturating_mul(rest.len())
        ));
    }
    let mut out = Vec::with_capacity(items.len() * rest.len());
    for i in &items {
        for r in &rest {
            out.push(format!("{head}{i}{r}"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces_expand_ranges_lists_and_padding() {
        assert_eq!(
            expand_braces("s-{000..002}.tar").unwrap(),
            ["s-000.tar", "s-001.tar", "s-002.tar"]
        );
        assert_eq!(
            expand_braces("{a,b}/{8..10}").unwrap(),
            ["a/8", "a/9", "a/10", "b/8", "b/9", "b/10"]
        );
        assert_eq!(
            expand_braces("{1..03}{8..9}").unwrap(),
            ["018", "019", "028", "029", "038", "039"]
        );
        assert_eq!(expand_braces("plain").unwrap(), ["plain"]);
        assert_eq!(
            expand_braces("{0..1,5..6,x}").unwrap(),
            ["0", "1", "5", "6", "x"]
        );
        for bad in [
            "x{1..",
            "x}",
            "{3..1}",
            "{a}",
            "{0..99999999999}",
            "{0..999}{0..1000}",
        ] {
            assert!(expand_braces(bad).is_err(), "{bad}");
        }
    }
}
