//! Tests of list parsing: labels, keys, columns, and rows a parser would misread.

use super::*;

/// Integer labels stay class indices (also written as pandas writes them, `10.0`), names are
/// numbered in sorted order, and a list mixing the two is refused, not renumbered.
#[test]
fn labels_are_integers_or_names_throughout_a_mix_is_refused_and_a_named_text_column_exists() {
    let cols = Columns::default();
    let list = |rows: &str| list_text(Path::new("l.jsonl"), rows.as_bytes(), &cols);
    let labels = |l: &Listing| l.inputs.iter().map(|i| i.label).collect::<Vec<_>>();
    let ints = list(concat!(
        "{\"path\":\"a.jpg\",\"label\":2}\n",
        "{\"path\":\"b.jpg\",\"label\":10.0}\n",
        "{\"path\":\"c.jpg\",\"label\":\"0\"}\n",
    ))
    .unwrap();
    assert_eq!(labels(&ints), [2, 10, 0]);
    assert_eq!(ints.classes.len(), 11);
    let names = list(concat!(
        "{\"path\":\"a.jpg\",\"label\":\"dog\"}\n",
        "{\"path\":\"b.jpg\",\"label\":\"cat\"}\n",
    ))
    .unwrap();
    assert_eq!(labels(&names), [1, 0]);
    let named = Columns {
        text: Some("caption".into()),
        ..Columns::default()
    };
    let rows = "{\"path\":\"a.jpg\",\"Caption\":\"x\"}\n{\"path\":\"b.jpg\"}\n";
    assert!(list_text(Path::new("l.jsonl"), rows.as_bytes(), &named).is_ok());
    // A label that is neither a number nor a string is an error line, not "unlabelled".
    let odd = list("{\"path\":\"a.jpg\",\"label\":true}\n").unwrap();
    assert!(odd.labelled && odd.inputs.is_empty());
    assert_eq!(odd.errors.len(), 1);
    assert_eq!(odd.errors[0].kind, "bad_label");
    // So is a "class name" longer than a class name may be; the others are still named.
    let rows = format!(
        "{{\"path\":\"a.jpg\",\"label\":\"{}\"}}\n{{\"path\":\"b.jpg\",\"label\":\"cat\"}}\n",
        "n".repeat(MAX_CLASS_NAME_BYTES + 1)
    );
    let long = list(&rows).unwrap();
    assert_eq!(long.classes, ["cat"]);
    assert_eq!(labels(&long), [0]);
    assert_eq!(long.errors.len(), 1);
    assert_eq!(long.errors[0].kind, "bad_label");
    let rows = "{\"path\":\"a.jpg\",\"text\":\"x\"}\n";
    let err = list_text(Path::new("l.jsonl"), rows.as_bytes(), &named).unwrap_err();
    assert!(err.to_string().contains("no `caption` column"), "{err}");
    for (rows, says) in [
        (
            "{\"path\":\"a.jpg\",\"label\":2}\n{\"path\":\"b.jpg\",\"label\":\"other\"}\n",
            "(\"2\", line 1) with class names (\"other\", line 2)",
        ),
        (
            "{\"path\":\"a.jpg\",\"label\":\"x\"}\n{\"path\":\"b.jpg\",\"label\":1.5}\n{\"path\":\"c.jpg\",\"label\":3}\n",
            "(\"3\", line 3) with class names (\"x\", line 1)",
        ),
    ] {
        let err = list(rows).unwrap_err().to_string();
        assert!(err.contains(says), "{err}");
    }
}

/// A row naming a member twice, or a label that is a number but no class index, is an error
/// line: a JSON parser would keep one of the two values, and `3.5` would become a class name.
#[test]
fn a_member_named_twice_or_a_fractional_label_is_an_error_line_and_a_header_twice_refused() {
    let cols = Columns::default();
    let list = |rows: &str| list_text(Path::new("l.jsonl"), rows.as_bytes(), &cols).unwrap();
    let l = list(concat!(
        "{\"path\":\"a.jpg\",\"label\":1,\"path\":\"b.jpg\"}\n",
        "{\"path\":\"c.jpg\",\"label\":3.5}\n",
        "{\"path\":\"d.jpg\",\"label\":1e20}\n",
        "{\"path\":\"e.jpg\",\"label\":2,\"x\":1,\"x\":2}\n",
        "{\"path\":\"f.jpg\",\"label\":\"4\"}\n",
    ));
    let errors: Vec<_> = l
        .errors
        .iter()
        .map(|e| (e.path.as_str(), e.kind.as_str(), e.message.as_str()))
        .collect();
    assert_eq!(
        errors,
        [
            ("l.jsonl:1", "bad_list_row", "the row names `path` twice"),
            (
                "l.jsonl:2",
                "bad_label",
                "its label \"3.5\" is neither a whole number (a class index) nor a name"
            ),
            (
                "l.jsonl:3",
                "bad_label",
                "its label \"1e+20\" is neither a whole number (a class index) nor a name"
            ),
            ("l.jsonl:4", "bad_list_row", "the row names `x` twice"),
        ]
    );
    let labels: Vec<_> = l.inputs.iter().map(|i| i.label).collect();
    assert_eq!(labels, [4]);
    assert_eq!(l.classes.len(), 5);
    // A CSV label that is a fraction is that row's error, not a class name.
    let l = list_text(
        Path::new("l.csv"),
        b"path,label\na.jpg,3\nb.jpg,3.5\nc.jpg,1\n",
        &cols,
    )
    .unwrap();
    assert_eq!(l.inputs.len(), 2);
    assert_eq!(
        (l.errors[0].path.as_str(), l.errors[0].kind.as_str()),
        ("l.csv:3", "bad_label")
    );
    assert!(
        l.errors[0].message.contains("\"3.5\" is neither"),
        "{:?}",
        l.errors
    );
    let l = list_text(
        Path::new("l.csv"),
        b"path,label\na.jpg,0.5\nb.jpg,1.5\n",
        &cols,
    )
    .unwrap();
    assert_eq!((l.inputs.len(), l.errors.len(), l.classes.len()), (0, 2, 0));
    let err = list_text(
        Path::new("l.csv"),
        b"path,label,Caption,caption\na.jpg,1,x,y\n",
        &cols,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("the CSV header names the column `caption` twice"),
        "{err}"
    );
    // 200,000 columns (2 MB of header), checked in linear time.
    let wide: Vec<String> = (0..200_000).map(|i| format!("c{i}")).collect();
    let text = format!(
        "{},path,C7\n{}a.jpg,x\n",
        wide.join(","),
        "1,".repeat(200_000)
    );
    let err = list_text(Path::new("l.csv"), text.as_bytes(), &cols).unwrap_err();
    assert!(err.to_string().contains("column `C7` twice"), "{err}");
    // Trailing commas (unnamed columns) are no name given twice.
    let trailing = list_text(
        Path::new("l.csv"),
        b"path,label,,
a.jpg,1,,
",
        &cols,
    )
    .unwrap();
    assert_eq!(trailing.inputs.len(), 1);
}

/// Rows a parser would misread are error lines, or the list is refused: a CSV row with more
/// fields than the header (an unquoted comma), a quote left open to the end of the file, a
/// JSONL line that is no object. A byte order mark before JSONL is skipped.
#[test]
fn rows_that_would_be_misread_are_error_lines_or_refuse_the_list() {
    let cols = Columns::default();
    let errors = |name: &str, rows: &str| {
        let l = list_text(Path::new(name), rows.as_bytes(), &cols).unwrap();
        let e: Vec<(String, String, String)> = (l.errors.iter())
            .map(|e| (e.path.clone(), e.kind.clone(), e.message.clone()))
            .collect();
        (l.inputs.len(), e)
    };
    let (kept, e) = errors(
        "l.csv",
        "path,label,text\na.jpg,cat,\"hello, world\"\nd.jpg,cat,hi, there\n\
         e.jpg,dog,\"two\nlines\"\nf.jpg,dog,x,y,z\n",
    );
    assert_eq!(kept, 2);
    let says = |n| {
        format!(
            "the row has {n} fields where the header names 3 columns (a field holding a \
             comma must be quoted)"
        )
    };
    assert_eq!(
        e,
        [
            ("l.csv:3".into(), "bad_list_row".into(), says(4)),
            ("l.csv:6".into(), "bad_list_row".into(), says(5)),
        ]
    );
    let (kept, e) = errors("l.csv", "path,label\nHTTPS://host/a.jpg,cat\nb.jpg,dog\n");
    assert_eq!(kept, 1);
    assert_eq!(
        (e[0].0.as_str(), e[0].1.as_str()),
        ("l.csv:2", "bad_list_row")
    );
    assert!(
        e[0].2
            .starts_with("its path is a URL: a list names local files"),
        "{e:?}"
    );
    // Trailing commas are no fields.
    let (kept, e) = errors("l.csv", "path,label\na.jpg,cat,\nb.jpg,dog,,\n");
    assert_eq!((kept, e.len()), (2, 0), "{e:?}");
    // Lines are the file's, whatever ends them, blank lines counted.
    let (_, e) = errors("l.csv", "path,label\r\na.jpg,cat,x\r\n\r\nb.jpg,dog,y\r\n");
    let lines: Vec<&str> = e.iter().map(|(p, _, _)| p.as_str()).collect();
    assert_eq!(lines, ["l.csv:2", "l.csv:4"]);
    let (_, e) = errors("l.csv", "path,label\na.jpg,cat,x\n\nb.jpg,dog,y\n");
    let lines: Vec<&str> = e.iter().map(|(p, _, _)| p.as_str()).collect();
    assert_eq!(lines, ["l.csv:2", "l.csv:4"]);
    let (_, e) = errors("l.csv", "path,label\ra.jpg,cat,x\r\rb.jpg,dog,y\r");
    let lines: Vec<&str> = e.iter().map(|(p, _, _)| p.as_str()).collect();
    assert_eq!(lines, ["l.csv:2", "l.csv:4"]);
    // A quoted field's line breaks count: the next row starts lines later.
    let (_, e) = errors("l.csv", "path,label\n\"a\nb.jpg\",cat\nc.jpg,dog,y\n");
    let lines: Vec<&str> = e.iter().map(|(p, _, _)| p.as_str()).collect();
    assert_eq!(lines, ["l.csv:4"]);
    // The row's phantom label taught no class.
    let l = list_text(
        Path::new("l.csv"),
        b"path,label\na,b.jpg,cat\nc.jpg,dog\n",
        &cols,
    );
    assert_eq!(l.unwrap().classes, ["dog"]);
    let open = "path,label,text\na.jpg,cat,\"unclosed\nb.jpg,dog,x\n";
    let err = list_text(Path::new("l.csv"), open.as_bytes(), &cols).unwrap_err();
    assert!(
        err.to_string()
            .contains("line 2: a quoted field opened there (byte 10 of the row) is not closed"),
        "{err}"
    );
    let (kept, e) = errors(
        "l.jsonl",
        "\u{feff}{\"path\":\"a.jpg\",\"label\":1}\n{not json}\n[1, 2]\n",
    );
    assert_eq!(kept, 1);
    let kinds: Vec<(&str, &str)> = (e.iter())
        .map(|(p, k, _)| (p.as_str(), k.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [("l.jsonl:2", "bad_list_row"), ("l.jsonl:3", "bad_list_row")]
    );
    assert!(e
        .iter()
        .all(|(_, _, m)| m.starts_with("the row is no JSON object")));
}

#[test]
fn rows_read_back_as_the_csv_crate_reads_them() {
    let rows: &[&[u8]] = &[
        b"a.jpg,3,plain\n",
        b"a.jpg,3,plain",
        b"a.jpg,3,plain\r\n",
        b"a.jpg,3,plain\r",
        b"\"a, b.jpg\",\"say \"\"hi\"\"\",\"two\nlines\"\n",
        b"a.jpg,,\n",
        b",\n",
        b"\"\"\n",
        b"a.jpg,\"unterminated\n",
        b"a.jpg,\"quoted\"trailing,x\n",
        b"only\n",
        b"\n",
        b"",
        b"\r\n\r\n",
        "caf\u{e9}.jpg,\u{1f600},\u{feff}bom\n".as_bytes(),
        "\u{feff}bom.jpg,1\n".as_bytes(),
    ];
    let mut out = Vec::new();
    // One parser for every row, in this order: each row starts from a reset parser.
    for row in rows {
        let ours = csv_fields(row, &mut out)
            .unwrap()
            .map(|f| f.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let theirs = csv_crate_first_record(row).unwrap();
        assert_eq!(ours, theirs, "row {:?}", String::from_utf8_lossy(row));
    }
}

#[test]
fn a_field_that_is_not_utf8_is_named() {
    let mut out = Vec::new();
    let err = csv_fields(b"a.jpg,ok,\xff\xfe\n", &mut out).unwrap_err();
    assert_eq!(err, "field 3 of the row is not UTF-8");
    assert!(csv_crate_first_record(b"a.jpg,ok,\xff\xfe\n").is_err());
    // The parser is usable again after the error.
    let fields = csv_fields(b"b.jpg,1\n", &mut out).unwrap().unwrap();
    assert_eq!(fields, ["b.jpg", "1"]);
}

#[test]
fn a_row_longer_than_a_parser_buffer_reads_whole() {
    let long = format!(
        "a.jpg,\"{}\",{}\n",
        "x,\"\"".repeat(20_000),
        "y".repeat(70_000)
    );
    let mut out = Vec::new();
    let ours = csv_fields(long.as_bytes(), &mut out).unwrap().unwrap();
    let theirs = csv_crate_first_record(long.as_bytes()).unwrap().unwrap();
    assert_eq!(ours, theirs);
    assert_eq!(ours[1].len(), 20_000 * 3);
}

#[test]
fn a_jsonl_caption_that_is_a_number_is_its_text_as_written_and_a_list_stays_metadata() {
    let columns = Columns::default();
    for (row, text) in [
        (
            r#"{"path": "a.png", "text": 2024.10, "n": 1}"#,
            Some("2024.10"),
        ),
        (r#"{"path": "a.png", "text": 1e2}"#, Some("1e2")),
        (r#"{"path": "a.png", "TEXT": true}"#, Some("true")),
        (r#"{"path": "a.png", "text": "plain"}"#, Some("plain")),
        (r#"{"path": "a.png", "text": null}"#, None),
    ] {
        let (got, rest) = row_columns(row.as_bytes(), &ContainerKind::Jsonl, &columns).unwrap();
        assert_eq!(got.as_deref(), text, "{row}");
        assert!(
            !rest.keys().any(|k| k.eq_ignore_ascii_case("text")),
            "{row}"
        );
    }
    // Several captions (a list), or an object, are no one text: kept in the `.json`.
    for row in [
        r#"{"path": "a.png", "text": ["a dog", "a brown dog"]}"#,
        r#"{"path": "a.png", "Text": {"en": "a dog"}}"#,
    ] {
        let (got, rest) = row_columns(row.as_bytes(), &ContainerKind::Jsonl, &columns).unwrap();
        let kept = rest.iter().find(|(k, _)| k.eq_ignore_ascii_case("text"));
        assert!(
            got.is_none() && kept.is_some_and(|(_, v)| !v.is_string()),
            "{row}"
        );
    }
}

/// Rows as Python's `json.dumps` writes them: `NaN`, `Infinity` and `-Infinity` read as null (a
/// NaN label is no label, as in Parquet); the words inside strings stay text. Labels of -1 are
/// no label either.
#[test]
fn python_json_rows_read_their_non_finite_numbers_as_null() {
    let cols = Columns::default();
    let rows = concat!(
        "{\"path\": \"a.jpg\", \"label\": 1, \"score\": NaN}\n",
        "{\"path\": \"b.jpg\", \"label\": NaN, \"text\": \"NaN bread\"}\n",
        "{\"path\": \"c.jpg\", \"label\": -1, \"range\": [-Infinity, Infinity]}\n",
    );
    let l = list_text(Path::new("l.jsonl"), rows.as_bytes(), &cols).unwrap();
    assert!(l.errors.is_empty(), "{:?}", l.errors);
    let labels: Vec<_> = l.inputs.iter().map(|i| i.label).collect();
    assert_eq!(labels, [1, -1, -1]);
    let read = |row: &str| row_columns(row.as_bytes(), &ContainerKind::Jsonl, &cols).unwrap();
    let lines: Vec<&str> = rows.lines().collect();
    assert_eq!(read(lines[0]).1["score"], serde_json::Value::Null);
    assert_eq!(read(lines[1]).0.as_deref(), Some("NaN bread"));
    assert_eq!(read(lines[2]).1["range"], serde_json::json!([null, null]));
}

/// Binary files given as lists are named for what they are (Parquet, compressed, tar, UTF-16),
/// whatever the file's name; text with a zero-width prefix is still text.
#[test]
fn binary_lists_are_refused_by_their_content() {
    let cols = Columns::default();
    let mut tar = vec![0u8; 512];
    tar[..6].copy_from_slice(b"a.jpg\0");
    tar[257..263].copy_from_slice(b"ustar\0");
    let cases: [(&[u8], &str); 5] = [
        (b"PAR1\x15\x04", "it is a Parquet file"),
        (b"\x28\xb5\x2f\xfd\x04\x58", "it is compressed"),
        (b"BZh91AY&SY", "it is compressed"),
        (&tar, "it is a tar archive"),
        (b"p\0a\0t\0h\0\n\0", "it holds NUL bytes"),
    ];
    for (text, says) in cases {
        let err = list_text(Path::new("l.csv"), text, &cols).unwrap_err();
        assert!(err.to_string().contains(says), "{says}: {err}");
    }
    let l = list_text(Path::new("l.csv"), b"\xEF\xBB\xBFpath\na.jpg\n", &cols).unwrap();
    assert_eq!(l.inputs.len(), 1);
    // A path holding `ustar` where a tar's magic stands is still a path.
    let mut text = b"path\n".to_vec();
    text.resize(257, b'a');
    text.extend_from_slice(b"ustard.jpg\n");
    assert_eq!(
        list_text(Path::new("l.csv"), &text, &cols)
            .unwrap()
            .inputs
            .len(),
        1
    );
}
