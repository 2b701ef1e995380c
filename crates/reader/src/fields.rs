//! Which carried fields a loader may deliver: the manifest's `fields` and `optional_fields`, less
//! what every batch already holds (the image, the key, the label), plus `json` for packed shards,
//! whose sample object is shardtool's metadata.

use crate::ReadError;
use shardtool_manifest::{Manifest, ShardFormat};

/// Names a batch delivers on its own, and where.
fn built_in(name: &str) -> Option<&'static str> {
    match name {
        "key" => Some("the batch's keys"),
        "label" => Some("the batch's labels"),
        "pixels" => Some("the batch's image data"),
        n if shardtool_wds::is_image_field(n) => Some("the batch's image data"),
        _ => None,
    }
}

/// Whether `name`, an image field's name, is a carried field wherever a sample of `m` has it:
/// packed records hold their image as pixels, and a tar sample's image is its first image field
/// by [`shardtool_wds::IMAGE_FIELDS`]' order, so `name` is carried when every sample has an image
/// field ranked before it (a `png` beside each `jpg`).
fn carried_image_field(m: &Manifest, name: &str) -> bool {
    let wds = m.shards.iter().any(|s| s.format == ShardFormat::Wds);
    !wds || m
        .fields
        .iter()
        .any(|f| f != name && shardtool_wds::image_field([f.as_str(), name]) == Some(f.as_str()))
}

/// Whether a batch delivers `name` on its own, so that it is no carried field of `m`.
fn delivered_anyway(m: &Manifest, name: &str) -> bool {
    built_in(name).is_some()
        && !(shardtool_wds::is_image_field(name) && carried_image_field(m, name))
}

/// The fields of `m` a loader can be asked for: `(every sample has it, some samples have it)`.
pub fn available_fields(m: &Manifest) -> (Vec<String>, Vec<String>) {
    let keep = |list: &[String]| -> Vec<String> {
        list.iter()
            .filter(|f| !delivered_anyway(m, f))
            .cloned()
            .collect()
    };
    let mut always = keep(&m.fields);
    let optional = keep(&m.optional_fields);
    let packed = m.shards.iter().any(|s| s.format == ShardFormat::Packed);
    let wds = m.shards.iter().any(|s| s.format == ShardFormat::Wds);
    let json = "json".to_string();
    if packed && !always.contains(&json) && !optional.contains(&json) {
        // A packed record's sample object stands in for `json`; a tar sample may lack one.
        if wds {
            return (always, with(optional, json));
        }
        always = with(always, json);
    }
    (always, optional)
}

fn with(mut list: Vec<String>, name: String) -> Vec<String> {
    list.push(name);
    list.sort();
    list
}

/// Checks the fields asked of a loader over `m` ([`LoaderBuilder::fields`](crate::LoaderBuilder::fields)):
/// each one a carried field of the dataset, none twice. The error names the field and lists those
/// the dataset has.
pub fn check_fields(m: &Manifest, requested: &[String]) -> Result<(), ReadError> {
    let (always, optional) = available_fields(m);
    for (i, f) in requested.iter().enumerate() {
        if requested[..i].contains(f) {
            return Err(ReadError::BadOptions(format!(
                "field {f:?} is asked for twice"
            )));
        }
        if always.contains(f) || optional.contains(f) {
            continue;
        }
        if let Some(where_) = built_in(f) {
            // Tar samples may hold members named so (packed records cannot).
            let wds = m.shards.iter().any(|s| s.format == ShardFormat::Wds);
            let listed = m.fields.contains(f) || m.optional_fields.contains(f);
            let member = wds && listed && !shardtool_wds::is_image_field(f);
            return Err(ReadError::BadOptions(if member {
                format!("the dataset's own {f:?} members cannot be delivered: the name is {where_}")
            } else {
                format!("field {f:?} is not a carried field: it is delivered as {where_}")
            }));
        }
        let list = |l: &[String]| {
            if l.is_empty() {
                "none".to_string()
            } else {
                l.join(", ")
            }
        };
        // Field names are kept in lower case: `TXT` is `txt`.
        let lower = f.to_lowercase();
        let hint = match &lower != f && (always.contains(&lower) || optional.contains(&lower)) {
            true => format!(" (names are in lower case: ask for {lower:?})"),
            false => String::new(),
        };
        let some = match optional.is_empty() {
            true => String::new(),
            false => format!(" and {} in some", list(&optional)),
        };
        return Err(ReadError::BadOptions(format!(
            "the dataset has no field {f:?}{hint}; it carries {} in every sample{some}",
            list(&always)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardtool_manifest::ShardEntry;

    fn manifest(format: ShardFormat, fields: &[&str], optional: &[&str]) -> Manifest {
        let shard = ShardEntry {
            file: "s.tar".into(),
            format,
            compression: None,
            samples: 1,
            bytes: 1,
            checksum: "xxh3:0000000000000000".into(),
            uncompressed_bytes: None,
            uncompressed_checksum: None,
        };
        let mut m = Manifest::new(
            "t",
            vec![],
            fields.iter().map(|f| f.to_string()).collect(),
            vec![shard],
        );
        m.optional_fields = optional.iter().map(|f| f.to_string()).collect();
        m
    }

    fn asked(m: &Manifest, names: &[&str]) -> Result<(), String> {
        let names: Vec<String> = names.iter().map(|f| f.to_string()).collect();
        check_fields(m, &names).map_err(|e| e.to_string())
    }

    #[test]
    fn tar_fields_are_the_manifests_less_the_image() {
        let m = manifest(ShardFormat::Wds, &["cls", "jpg", "json"], &["txt"]);
        assert_eq!(
            available_fields(&m),
            (vec!["cls".into(), "json".into()], vec!["txt".into()])
        );
        assert_eq!(asked(&m, &["txt", "json", "cls"]), Ok(()));
        let e = asked(&m, &["caption"]).unwrap_err();
        assert!(e.contains("no field \"caption\""), "{e}");
        assert!(
            e.contains("cls, json in every sample and txt in some"),
            "{e}"
        );
        let e = asked(&m, &["jpg"]).unwrap_err();
        assert!(
            e.contains("\"jpg\" is not a carried field") && e.contains("image"),
            "{e}"
        );
        let e = asked(&m, &["txt", "txt"]).unwrap_err();
        assert!(e.contains("twice"), "{e}");
    }

    #[test]
    fn an_image_field_beside_a_better_ranked_image_is_carried() {
        // Every sample's image is its jpg: the png beside it is carried.
        let m = manifest(ShardFormat::Wds, &["jpg", "png"], &["webp", "label"]);
        assert_eq!(
            available_fields(&m),
            (vec!["png".into()], vec!["webp".into()])
        );
        assert_eq!(asked(&m, &["png", "webp"]), Ok(()));
        let e = asked(&m, &["label"]).unwrap_err();
        assert!(
            e.contains("own \"label\" members cannot be delivered") && e.contains("labels"),
            "{e}"
        );
        // Some samples may have only a png, their image.
        let m = manifest(ShardFormat::Wds, &["png"], &["jpg"]);
        assert_eq!(available_fields(&m), (vec![], vec![]));
        let e = asked(&m, &["png"]).unwrap_err();
        assert!(e.contains("\"png\" is not a carried field"), "{e}");
        // A packed record's image is its pixels: every field is carried.
        let m = manifest(ShardFormat::Packed, &["key", "label", "pixels", "png"], &[]);
        assert_eq!(asked(&m, &["png"]), Ok(()));
    }

    #[test]
    fn packed_records_always_have_json() {
        let m = manifest(ShardFormat::Packed, &["key", "label", "pixels", "txt"], &[]);
        assert_eq!(
            available_fields(&m),
            (vec!["json".into(), "txt".into()], vec![])
        );
        assert_eq!(asked(&m, &["json", "txt"]), Ok(()));
        let e = asked(&m, &["label"]).unwrap_err();
        assert!(e.contains("labels"), "{e}");
        let e = asked(&m, &["cls"]).unwrap_err();
        assert!(e.ends_with("it carries json, txt in every sample"), "{e}");
        let e = asked(&m, &["TXT"]).unwrap_err();
        assert!(
            e.contains("(names are in lower case: ask for \"txt\")"),
            "{e}"
        );
    }
}
