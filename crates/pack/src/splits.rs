//! Dataset splits told apart by file names, as the Hugging Face Hub names them (`train-…`,
//! `data/validation-…`, `default/test/…`): a folder of shards or Parquet files holding several
//! splits is refused, since packing it would mix held-out data into the training set. And a
//! Hugging Face imagefolder's metadata beside images, which an ImageFolder would drop, is asked
//! about.

use std::collections::BTreeMap;

/// Split keywords, as the Hugging Face `datasets` library infers splits from file names and
/// folders: each a whole word of the path, between separators or digits.
const KEYWORDS: [(&str, &str); 10] = [
    ("train", "train"),
    ("training", "train"),
    ("validation", "validation"),
    ("valid", "validation"),
    ("val", "validation"),
    ("dev", "validation"),
    ("test", "test"),
    ("testing", "test"),
    ("eval", "test"),
    ("evaluation", "test"),
];

/// The split a relative path names, and where its keyword ends: the first whole word of the
/// path (lower-cased) that is a split keyword.
fn split_of(path: &str) -> Option<(&'static str, usize)> {
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_alphabetic() {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let word = path[start..i].to_ascii_lowercase();
        if let Some((_, split)) = KEYWORDS.iter().find(|(k, _)| *k == word) {
            return Some((split, i));
        }
    }
    None
}

/// The split a folder's whole name names (`val` is `validation`), if any.
pub(crate) fn split_named(name: &str) -> Option<&'static str> {
    let name = name.to_ascii_lowercase();
    KEYWORDS.iter().find(|(k, _)| *k == name).map(|(_, s)| *s)
}

/// Refuses an ImageFolder whose one class folder is named as a split and holds folders
/// (`imagenet/` holding only `train/<class>/`): its images would all be labelled `train`.
pub(crate) fn sole_split(root: &str, class: &str, holds_folders: bool) -> Result<(), String> {
    if !holds_folders || split_named(class).is_none() {
        return Ok(());
    }
    Err(format!(
        "the only class folder of {root} is {class}, a dataset split holding folders: its images \
         would all be one class; pack the split: {}/{class}",
        root.trim_end_matches('/')
    ))
}

/// Refuses an ImageFolder whose class folders are all named as splits (`train`, `val`, …):
/// the folder above the splits was given, whose images would be labelled by their split.
pub(crate) fn splits_as_classes(root: &str, classes: &[&str]) -> Result<(), String> {
    let split = split_named;
    let splits: std::collections::BTreeSet<&str> =
        classes.iter().filter_map(|c| split(c)).collect();
    if splits.len() < 2 || classes.iter().any(|c| split(c).is_none()) {
        return Ok(());
    }
    let first = classes
        .iter()
        .find(|c| split(c) == Some("train"))
        .unwrap_or(&classes[0]);
    Err(format!(
        "the class folders of {root} are {}: dataset splits, each holding class folders, would \
         become the classes; pack one split: {}/{first}",
        classes.join(", "),
        root.trim_end_matches('/')
    ))
}

/// Refuses `files` (paths relative to the folder `arg` names, with extension `ext`) when they
/// belong to more than one split, naming each and how to pack one.
pub(crate) fn one_split(arg: &str, files: &[&str], ext: &str) -> Result<(), String> {
    let mut splits: BTreeMap<&str, (usize, String)> = BTreeMap::new();
    // The folders above split folders (`full/` of `full/train/…`): a Hub repository's
    // configurations, each a whole dataset; with each, its first split folder (train's first).
    let mut configs: BTreeMap<&str, (usize, String)> = BTreeMap::new();
    for f in files {
        if let Some((split, end)) = split_of(f) {
            if let Some(slash) = f[end..].find('/') {
                let config = f[..end].rfind('/').map_or("", |at| &f[..at]);
                let c = configs.entry(config).or_insert_with(|| (0, String::new()));
                c.0 += 1;
                if c.1.is_empty() || (split == "train" && !c.1.contains("train")) {
                    c.1 = format!("{}/", &f[..end + slash]);
                }
            }
            let e = splits.entry(split).or_insert_with(|| (0, String::new()));
            e.0 += 1;
            if e.1.is_empty() {
                // Files named by the keyword: a pattern of them; a folder named so: the folder.
                let (head, rest) = f.split_at(end);
                e.1 = match rest.find('/') {
                    // The whole folder name (`train2017/`), not the keyword alone.
                    Some(slash) => format!("{}/", &f[..end + slash]),
                    None => format!("{head}*.{ext}"),
                };
            }
        }
    }
    let base = arg.trim_end_matches('/');
    if configs.len() > 1 {
        let named: Vec<String> = (configs.iter())
            .map(|(c, (n, _))| match c.is_empty() {
                true => format!("the top folder ({})", file_count(*n)),
                false => format!("{c}/ ({})", file_count(*n)),
            })
            .collect();
        let first = (configs.iter().find(|(c, _)| !c.is_empty())).map(|(_, (_, f))| f);
        return Err(format!(
            "the folder holds split folders in {}: several configurations of a dataset, each \
             whole; packed together their samples would mix, and repeat where one holds \
             another's; pack one split of one, e.g. '{base}/{}' (a pattern naming several \
             folders' files packs them together, as asked)",
            named.join(", "),
            first.map_or("", |f| f.as_str())
        ));
    }
    // The example is the training split where there is one.
    let example = splits.get_key_value("train").or(splits.iter().next());
    let Some((first, (_, glob))) = example.filter(|_| splits.len() > 1) else {
        return Ok(());
    };
    let named: Vec<String> = (splits.iter())
        .map(|(s, (n, _))| format!("{s} ({})", file_count(*n)))
        .collect();
    let named = named.join(", ");
    // Remote inputs take a folder or a brace pattern, not globs.
    if arg.contains("://") {
        let (example, partly) = match glob.ends_with('/') {
            true => (glob.clone(), String::new()),
            false => {
                // As a URL spells them: `%`, `,`, braces, `#` and `?` would be read otherwise.
                let mut of_split: Vec<String> = (files.iter())
                    .filter(|f| split_of(f).is_some_and(|(s, _)| s == *first))
                    .map(|f| url_escaped(f))
                    .collect();
                of_split.sort_unstable();
                let names: Vec<&str> = of_split.iter().map(String::as_str).collect();
                let (pattern, covered) = brace_of(&names);
                let partly = match covered < names.len() {
                    true => format!(
                        ", naming {covered} of its {} files (the first runs of their numbers; \
                         add the other runs' ranges to the braces)",
                        names.len()
                    ),
                    false => String::new(),
                };
                (pattern, partly)
            }
        };
        return Err(format!(
            "the folder holds the splits {named}: packed together, held-out samples would mix \
             with training ones; pack one split by naming its files, e.g. the {first} split as \
             '{base}/{example}'{partly} (a pattern naming several splits' files packs them \
             together, as asked)"
        ));
    }
    Err(format!(
        "the folder holds the splits {named}: packed together, held-out samples would mix with \
         training ones; pack one split, e.g. the {first} split as '{base}/{glob}' (a pattern \
         naming several splits' files, such as '{base}/{{a,b}}/*.{ext}', packs them together, \
         as asked)"
    ))
}

/// `name` with the characters a URL or a brace pattern would read otherwise escaped.
fn url_escaped(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '%' | ',' | '{' | '}' | '#' | '?' | '*' | '\'' => {
                out.push_str(&format!("%{:02X}", c as u32))
            }
            c => out.push(c),
        }
    }
    out
}

/// A brace pattern naming `files` (sorted, at least one) and how many of them it names: a range
/// where they differ by one zero-padded number counting up by one (`a-{00000..00009}.tar`), a
/// list of a few, or, for many with gaps in their numbering, the range of the first run.
fn brace_of(files: &[&str]) -> (String, usize) {
    let (Some(first), Some(last)) = (files.first(), files.last()) else {
        return (String::new(), 0);
    };
    let digit = |b: Option<&u8>| b.is_some_and(u8::is_ascii_digit);
    let mut head = (first.bytes().zip(last.bytes()))
        .take_while(|(a, b)| a == b)
        .count();
    while head > 0 && (digit(first.as_bytes().get(head - 1)) || !first.is_char_boundary(head)) {
        head -= 1;
    }
    let (a, b) = (&first.as_bytes()[head..], &last.as_bytes()[head..]);
    let mut tail = (a.iter().rev().zip(b.iter().rev()))
        .take_while(|(x, y)| x == y)
        .count();
    tail = tail.min(a.len().min(b.len()));
    while tail > 0 && (digit(a.get(a.len() - tail)) || !first.is_char_boundary(first.len() - tail))
    {
        tail -= 1;
    }
    let number = |f: &str| -> Option<(usize, u64)> {
        let mid = f.get(head..f.len().checked_sub(tail)?)?;
        let same = f.starts_with(&first[..head]) && f.ends_with(&first[first.len() - tail..]);
        (same && !mid.is_empty() && mid.bytes().all(|c| c.is_ascii_digit()))
            .then(|| Some((mid.len(), mid.parse().ok()?)))?
    };
    let numbers: Option<Vec<(usize, u64)>> = files.iter().map(|f| number(f)).collect();
    let numbers = numbers.filter(|n| n.iter().all(|&(w, _)| w == n[0].0));
    let mid = |f: &str| f[head..f.len() - tail].to_string();
    // Runs of files numbered one after another, each as `a..b` (or a lone number).
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (i, &(_, v)) in numbers.as_deref().unwrap_or_default().iter().enumerate() {
        match runs.last_mut() {
            Some(r) if numbers.as_deref().is_some_and(|n| n[r.1].1 + 1 == v) => r.1 = i,
            _ => runs.push((i, i)),
        }
    }
    let item = |&(a, b): &(usize, usize)| match a == b {
        true => mid(files[a]),
        false => format!("{}..{}", mid(files[a]), mid(files[b])),
    };
    let braced = |runs: &[(usize, usize)]| {
        let (start, end) = (&first[..head], &first[first.len() - tail..]);
        let items: Vec<String> = runs.iter().map(item).collect();
        format!("{start}{{{}}}{end}", items.join(","))
    };
    const MOST: usize = 16;
    match files.len() {
        1 => (first.to_string(), 1),
        n if !runs.is_empty() && runs.len() <= MOST => (braced(&runs), n),
        n if n <= MOST => (format!("{{{}}}", files.join(",")), n),
        _ if !runs.is_empty() => (braced(&runs[..MOST]), runs[MOST - 1].1 + 1),
        _ => (first.to_string(), 1),
    }
}

/// `n file(s)`, in words.
fn file_count(n: usize) -> String {
    format!("{n} file{}", if n == 1 { "" } else { "s" })
}

/// Why Parquet files beside `images` cannot be packed when every one is a Hugging Face
/// imagefolder's `metadata.parquet` (neither the images nor the rows alone are the dataset).
pub(crate) fn parquet_metadata(parquet: &[String], images: &[String]) -> Option<String> {
    let metadata = |f: &String| f.rsplit(['/', '\\']).next() == Some("metadata.parquet");
    let first = parquet.first().filter(|_| !images.is_empty())?;
    parquet
        .iter()
        .all(metadata)
        .then(|| metadata_parquet(first))
}

fn metadata_parquet(file: &str) -> String {
    format!(
        "{file} is a Hugging Face imagefolder's metadata, which pack reads as metadata.jsonl \
         or metadata.csv: write it as one (pandas: read_parquet, then \
         to_json(orient=\"records\", lines=True)) beside it, and remove it; or pass \
         --input-format imagefolder to pack the images by their folders without it"
    )
}

/// A Hugging Face imagefolder's metadata in folder `dir` (`metadata.jsonl` or `.csv`: captions
/// and labels by file name, which an ImageFolder would drop): `Ok(file)` for the one at its top,
/// which packs as a list with its images; `Err(why)` for one only in its folders (splits, packed
/// one at a time) or both names at its top; `Ok(None)` for none.
pub(crate) fn imagefolder_metadata(
    dir: &std::path::Path,
) -> Result<Option<std::path::PathBuf>, String> {
    let metadata = crate::list_file::metadata_in;
    match metadata(dir).as_slice() {
        [one] => return Ok(Some(one.clone())),
        [a, b] => {
            return Err(format!(
                "{} and {} both hold a Hugging Face imagefolder's metadata: pack one of them, a \
                 list (its images are named by file_name)",
                a.display(),
                b.display()
            ))
        }
        _ => {}
    }
    let folders: Vec<_> = (std::fs::read_dir(dir).into_iter().flatten().flatten())
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    let mut nested: Vec<_> = (folders.iter())
        .filter_map(|f| metadata(f).into_iter().next())
        .collect();
    nested.sort();
    // The example is the training split where there is one.
    let train = |m: &&std::path::PathBuf| {
        let name = m.parent().and_then(|f| f.file_name());
        name.is_some_and(|n| split_named(&n.to_string_lossy()) == Some("train"))
    };
    let others = nested.len().saturating_sub(1);
    match nested.iter().find(train).or(nested.first()) {
        // An imagefolder's metadata in Parquet, at its top or in a split's folder: its
        // captions and labels would be dropped, the split taken for a class.
        None => {
            let mut parquet: Vec<_> = (std::iter::once(dir.to_path_buf()).chain(folders))
                .map(|d| d.join("metadata.parquet"))
                .filter(|p| p.is_file())
                .collect();
            parquet.sort();
            match parquet.first() {
                Some(p) => Err(metadata_parquet(&p.display().to_string())),
                None => Ok(None),
            }
        }
        Some(m) => {
            let folder = m.parent().unwrap_or(dir);
            // Split folders are no classes: packing them as an ImageFolder is refused too.
            let split =
                (folder.file_name()).is_some_and(|n| split_named(&n.to_string_lossy()).is_some());
            Err(format!(
                "{} holds a Hugging Face imagefolder's metadata (captions, labels by file name): \
                 pack its folder, {} (one split at a time){}{}",
                m.display(),
                folder.display(),
                match others {
                    0 => String::new(),
                    n => format!("; {n} other folder(s) beside it hold one too"),
                },
                match split {
                    true => "",
                    false =>
                        ", or pass --input-format imagefolder to pack the images by their \
                              folders without it",
                }
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn brace_patterns_name_exactly_the_files() {
        let cases: [(&[&str], &str); 5] = [
            (
                &[
                    "d/train-00000-of-00002.parquet",
                    "d/train-00001-of-00002.parquet",
                ],
                "d/train-{00000..00001}-of-00002.parquet",
            ),
            (
                &["a-8.tar", "a-9.tar", "a-10.tar"],
                "{a-8.tar,a-9.tar,a-10.tar}",
            ),
            (&["a-1.tar", "a-3.tar"], "a-{1,3}.tar"),
            (&["only.tar"], "only.tar"),
            (&["é-07é.tar", "é-08é.tar"], "é-{07..08}é.tar"),
        ];
        for (files, want) in cases {
            let (got, named) = super::brace_of(files);
            assert_eq!((got.as_str(), named), (want, files.len()));
            let mut expanded = crate::braces::expand_braces(&got).unwrap();
            expanded.sort_unstable();
            let mut files = files.to_vec();
            files.sort_unstable();
            assert_eq!(expanded, files);
        }
    }

    use super::*;

    #[test]
    fn splits_are_whole_words_of_the_path() {
        assert_eq!(
            split_of("data/train-00000-of-00002.parquet"),
            Some(("train", 10))
        );
        assert_eq!(
            split_of("default/validation/0000.parquet").unwrap().0,
            "validation"
        );
        assert_eq!(split_of("imagenet-val-000001.tar").unwrap().0, "validation");
        assert_eq!(split_of("test_0.parquet").unwrap().0, "test");
        for none in [
            "shard-000000.tar",
            "interval-3.tar",
            "retrain.parquet",
            "data/x.parquet",
        ] {
            assert_eq!(split_of(none), None, "{none}");
        }
    }

    #[test]
    fn class_folders_that_are_all_splits_are_refused() {
        let e = splits_as_classes("inet/", &["train", "val"]).unwrap_err();
        assert!(
            e.contains("are train, val") && e.ends_with("pack one split: inet/train"),
            "{e}"
        );
        splits_as_classes("x", &["cat", "train", "val"]).unwrap();
        splits_as_classes("x", &["train"]).unwrap();
        splits_as_classes("x", &["test", "testing"]).unwrap();
        // One split folder of class folders is refused; a class named `train` (CIFAR-100 has
        // one) holding images is not.
        let e = sole_split("inet/", "train", true).unwrap_err();
        assert!(e.ends_with("pack the split: inet/train"), "{e}");
        sole_split("x", "train", false).unwrap();
        sole_split("x", "trains", true).unwrap();
    }

    #[test]
    fn several_splits_are_refused_with_a_pattern_for_one() {
        let hf = [
            "data/test-00000-of-00001.parquet",
            "data/train-00000-of-00002.parquet",
            "data/train-00001-of-00002.parquet",
            "data/validation-00000-of-00001.parquet",
        ];
        let e = one_split("hf/", &hf, "parquet").unwrap_err();
        assert!(
            e.contains("splits test (1 file), train (2 files), validation (1 file)"),
            "{e}"
        );
        assert!(
            e.contains("the train split as 'hf/data/train*.parquet'"),
            "{e}"
        );
        let by_folder = ["default/train/0000.parquet", "default/test/0000.parquet"];
        let e = one_split("hub", &by_folder, "parquet").unwrap_err();
        assert!(e.contains("'hub/default/train/'"), "{e}");
        let coco = ["train2017/a.tar", "val2017/b.tar"];
        let e = one_split("coco", &coco, "tar").unwrap_err();
        assert!(e.contains("'coco/train2017/'"), "{e}");
        let e = one_split("http://h/coco/", &coco, "tar").unwrap_err();
        assert!(e.contains("'http://h/coco/train2017/'"), "{e}");
        // Remote files are named by a brace pattern of their own names (no globs there).
        let hub = [
            "data/test-00000-of-00001.parquet",
            "data/train-00000-of-00002.parquet",
            "data/train-00001-of-00002.parquet",
        ];
        let e = one_split("http://h/hf/", &hub, "parquet").unwrap_err();
        let want = "'http://h/hf/data/train-{00000..00001}-of-00002.parquet'";
        assert!(e.contains(want), "{e}");
        // Names a URL or a pattern would read otherwise are escaped; a long split with a gap
        // is named by its first run, and said to be.
        let odd = ["d/train,{1}#*'.tar", "d/test.tar"];
        let e = one_split("http://h/", &odd, "tar").unwrap_err();
        assert!(
            e.contains("'http://h/d/train%2C%7B1%7D%23%2A%27.tar'"),
            "{e}"
        );
        let mut gap: Vec<String> = (0..40)
            .filter(|i| *i != 30)
            .map(|i| format!("train-{i:04}.tar"))
            .collect();
        gap.push("test-0000.tar".into());
        let gap: Vec<&str> = gap.iter().map(String::as_str).collect();
        let e = one_split("http://h/", &gap, "tar").unwrap_err();
        assert!(
            e.contains("'http://h/train-{0000..0029,0031..0039}.tar' ("),
            "{e}"
        );
        let mut odd: Vec<String> = (0..100)
            .step_by(2)
            .map(|i| format!("train-{i:04}.tar"))
            .collect();
        odd.push("test-0000.tar".into());
        let odd: Vec<&str> = odd.iter().map(String::as_str).collect();
        let e = one_split("http://h/", &odd, "tar").unwrap_err();
        let first = "'http://h/train-{0000,0002,0004,0006,0008,0010,0012,0014,0016,0018,0020,0022,";
        assert!(
            e.contains(first) && e.contains("0030}.tar', naming 16 of its 50 files"),
            "{e}"
        );
        assert!(e.len() < 700, "{e}");
        // Configurations, each with its splits (or one split alone), are asked about first.
        let configs = [
            "full/train/0000.parquet",
            "full/test/0000.parquet",
            "mini/train/0000.parquet",
        ];
        let e = one_split("cfg", &configs, "parquet").unwrap_err();
        assert!(e.contains("in full/ (2 files), mini/ (1 file)"), "{e}");
        assert!(e.contains("e.g. 'cfg/full/train/'"), "{e}");
        let e = one_split(
            "cfg",
            &["full/train/0.parquet", "mini/train/0.parquet"],
            "parquet",
        );
        assert!(e.unwrap_err().contains("configurations"));
        let e = one_split("r", &["train/0.tar", "extra/train/0.tar"], "tar").unwrap_err();
        assert!(
            e.contains("the top folder (1 file), extra/ (1 file)"),
            "{e}"
        );
        // One split's files spread over folders, named by their files, are one dataset.
        let spread = [
            "00/train-0.parquet",
            "01/train-1.parquet",
            "x/y/train-2.parquet",
        ];
        one_split("s", &spread, "parquet").unwrap();
        one_split("cfg", &configs[..2], "parquet").unwrap_err();
        // One split, or none named, is a dataset.
        one_split("hf", &hf[1..3], "parquet").unwrap();
        one_split("w", &["shard-0.tar", "shard-1.tar"], "tar").unwrap();
    }
}
