//! Opening a job's Parquet files: each file's footer read, its columns chosen, and the files
//! checked to agree before any row is staged.

use super::*;

/// Makes every file read the same label and text columns: a file whose features lack the
/// `ClassLabel` another file's declare (re-saved by a tool that drops them) reads that column;
/// then files that still read two columns (captions from `caption` here and `text` there) are
/// refused, naming both: packed as they were, part of the dataset would silently lose its
/// labels or captions.
fn agree_on_columns(
    files: &[String],
    opened: &mut [Opened],
    options: &ListOptions,
) -> Result<(), ListError> {
    let declared = (opened.iter())
        .filter(|o| o.class_names.is_some())
        .find_map(|o| o.chosen.as_ref()?.label.clone());
    if let Some(hint) = declared.as_deref() {
        for o in opened.iter_mut() {
            let (Some(meta), Some(c)) = (&o.meta, &o.chosen) else {
                continue;
            };
            if c.label.is_none() && !c.label_left {
                // Chosen again from the footer already read (a URL is fetched once).
                let fields = meta
                    .file_metadata()
                    .schema_descr()
                    .root_schema()
                    .get_fields();
                if let Ok(again) = choose(fields, &options.columns, Some(hint)) {
                    o.chosen = Some(again);
                }
            }
        }
    }
    let shown = |i: usize| shardtool_core::redact_urls(&files[i]).into_owned();
    type Pick = fn(&Chosen) -> &Option<String>;
    let picks: [(&str, &str, Pick); 2] = [
        ("label", "--label-column", |c| &c.label),
        ("text", "--text-column", |c| &c.text),
    ];
    for (what, flag, pick) in picks {
        // Files read columns of two names (one without the column reads as unlabelled or
        // uncaptioned rows, as null values do).
        let mut named = (opened.iter().enumerate())
            .filter_map(|(i, o)| Some((i, pick(o.chosen.as_ref()?).as_deref()?)));
        let Some((first, a)) = named.next() else {
            continue;
        };
        if let Some((i, b)) = named.find(|(_, b)| b != &a) {
            return Err(ListError::BadInput {
                message: format!(
                    "the Parquet files' {what} columns differ: {a:?} in {}, {b:?} in {}; name \
                     one with {flag} (or leave it out with --drop-column), or pack the files \
                     apart",
                    shown(first),
                    shown(i)
                ),
            });
        }
    }
    Ok(())
}

/// Opens file `index`, `name` (a path, or a URL fetched first): its footer (columns, class
/// names, row groups), and the columns chosen for it.
pub(super) fn open_file(name: &str, index: usize, options: &ListOptions) -> Opened {
    let mut out = Opened {
        fetched: None,
        meta: None,
        chosen: None,
        class_names: None,
        groups: Vec::new(),
        failure: None,
        unread_lines: MAX_UNREAD_LINES.into(),
    };
    let fetched = match fetch_input(name, index, options) {
        Ok(f) => f,
        Err(e) => {
            out.failure = Some(format!("cannot fetch: {e}"));
            return out;
        }
    };
    let path = fetched.path.clone();
    out.fetched = Some(fetched);
    // The Parquet reader is not hardened against hostile files: a panic is that file's failure.
    let r = contain(|| -> Result<_, String> {
        let reader = open_reader(&path)?;
        let meta = reader.metadata();
        let schema = meta.file_metadata().schema_descr().root_schema();
        let features = hf_features(&reader);
        let declared = features.as_ref().map(hf_class_label_columns);
        let mut declared = declared.unwrap_or_default();
        // A dropped column is as if the file lacked it, its feature too.
        declared.retain(|c| !options.columns.is_dropped(c));
        // One `ClassLabel` column is the label whatever its name; of several (CIFAR-100's
        // fine and coarse labels) the user picks.
        let only = (declared.len() == 1).then(|| declared[0]);
        let chosen = choose(schema.get_fields(), &options.columns, only)?;
        if chosen.label.is_none() && options.columns.label.is_none() && declared.len() > 1 {
            return Err(format!(
                "no column \"label\", and {} ClassLabel columns to choose from ({}): name \
                 the label with --label-column (the others are carried in the .json)",
                declared.len(),
                declared.join(", ")
            ));
        }
        let names = (features.as_ref())
            .zip(chosen.label.as_ref())
            .map(|(f, l)| hf_class_names(f, l))
            .transpose()?
            .flatten();
        let mut groups = Vec::with_capacity(meta.num_row_groups());
        let mut first = 0u64;
        for g in meta.row_groups() {
            let n = u64::try_from(g.num_rows()).unwrap_or(0);
            groups.push((first, n));
            first = first.saturating_add(n);
        }
        Ok((chosen, names, groups, std::sync::Arc::new(meta.clone())))
    });
    match r {
        Ok(Ok((chosen, names, groups, meta))) => {
            out.meta = Some(meta);
            out.chosen = Some(chosen);
            out.class_names = names;
            out.groups = groups;
        }
        Ok(Err(e)) => out.failure = Some(e),
        Err(panic) => {
            out.failure = Some(format!("the Parquet reader failed on this file: {panic}"))
        }
    }
    out
}

/// Opens (and fetches) the Parquet files in parallel and checks that their columns fit what was
/// asked: the files, and the ClassLabel names they state. A column no file has is the
/// command's mistake ([`ListError::BadInput`]); a file's own failure stays in its [`Opened`].
pub(super) fn open_files(
    files: &[String],
    options: &ListOptions,
) -> Result<(Vec<Opened>, Option<Vec<String>>), ListError> {
    let mut opened = parallel_map(files, options.jobs, |i, name| open_file(name, i, options));
    agree_on_columns(files, &mut opened, options)?;
    // A column no file has (a misspelt --label-column, a layout without an `image` column) is
    // the command's mistake, not every file's failure.
    fn missing(o: &Opened) -> Option<&str> {
        o.failure.as_deref().filter(|f| {
            f.starts_with("no column ")
                || f.starts_with("no image column")
                || f.contains(" holds neither ")
        })
    }
    let first = opened.first().and_then(missing);
    if let Some(first) = first.filter(|_| opened.iter().all(|o| missing(o).is_some())) {
        return Err(ListError::BadInput {
            message: format!(
                "none of the {} Parquet file(s) fits the columns asked for: {first} (choose \
                 them with --image-column, --label-column, --text-column)",
                files.len()
            ),
        });
    }
    // A dropped column no file has is misspelt, or the files are not the ones meant.
    let dropped = (opened.iter())
        .filter_map(|o| o.chosen.as_ref())
        .fold(0u64, |all, c| all | c.dropped);
    let any_chosen = opened.iter().any(|o| o.chosen.is_some());
    if let Some(d) = (options.columns.unseen_drop(dropped)).filter(|_| any_chosen) {
        return Err(ListError::BadInput {
            message: format!(
                "--drop-column {d}: none of the {} Parquet file(s) has that column",
                files.len()
            ),
        });
    }
    // Class indices mean the names of the `ClassLabel` feature: files that state it must state
    // the same names, or the same index would be two classes.
    let mut stated: Option<(&String, &Vec<String>)> = None;
    for (name, o) in files.iter().zip(&opened) {
        let Some(names) = &o.class_names else {
            continue;
        };
        match stated {
            None => stated = Some((name, names)),
            Some((first, theirs)) if theirs != names => {
                let show = |f: &str, n: &[String]| {
                    let head: Vec<&str> = n.iter().take(4).map(String::as_str).collect();
                    let more = if n.len() > 4 { ", …" } else { "" };
                    let f = shardtool_core::redact_urls(f);
                    format!("{f} names {} ({}{more})", n.len(), head.join(", "))
                };
                return Err(ListError::BadInput {
                    message: format!(
                        "the Parquet files' ClassLabel features name other classes: {} and {}; \
                         pack them apart, or give every file the same names",
                        show(first, theirs),
                        show(name, names)
                    ),
                });
            }
            Some(_) => {}
        }
    }
    let class_label = stated.map(|(_, n)| n.clone());
    // A `label` read in one file and left as metadata in another (integers there, floats here,
    // as pandas writes a column with missing values) would label half the dataset.
    let read = files
        .iter()
        .zip(&opened)
        .find(|(_, o)| o.chosen.as_ref().is_some_and(|c| c.label.is_some()));
    let left = files
        .iter()
        .zip(&opened)
        .find(|(_, o)| o.chosen.as_ref().is_some_and(|c| c.label_left));
    if let (Some((a, _)), Some((b, _))) = (read, left) {
        return Err(ListError::BadInput {
            message: format!(
                "the label column holds class indices in {} but floats in {}: name it with \
                 --label-column to read whole floats as class indices everywhere",
                shardtool_core::redact_urls(a),
                shardtool_core::redact_urls(b)
            ),
        });
    }
    Ok((opened, class_label))
}

/// The column checks of [`list_parquet`] on local files alone, reading their footers: run
/// before an output is cleared, so a misspelt column leaves an earlier dataset there. Remote
/// files are fetched, and checked, when listed.
pub(crate) fn check_columns(files: &[String], options: &ListOptions) -> Result<(), ListError> {
    match files.iter().any(|f| crate::containers::is_remote(f)) {
        true => Ok(()),
        false => open_files(files, options).map(drop),
    }
}
