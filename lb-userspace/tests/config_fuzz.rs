//! The configuration parser, fuzzed. Random edits of the annotated example (lines
//! deleted, doubled, swapped or cut short, values replaced by awkward ones) and random text
//! never make it panic: the result is a configuration or a list of problems, each with a
//! line inside the file and words to act on. `PROPTEST_CASES` sets the count.

use proptest::prelude::*;

const EXAMPLE: &str = include_str!("../conf/example.toml");

/// One change to the text's lines.
#[derive(Clone, Debug)]
enum Edit {
    Delete(prop::sample::Index),
    Double(prop::sample::Index),
    Swap(prop::sample::Index, prop::sample::Index),
    CutShort(prop::sample::Index, prop::sample::Index),
    Value(prop::sample::Index, &'static str),
    Insert(prop::sample::Index, String),
}

/// Values that are wrong for most keys, or right in an unusual way.
const VALUES: &[&str] = &[
    "",
    "0",
    "-1",
    "65536",
    "99999999999999999999",
    "1e308",
    "nan",
    "inf",
    "-0.0",
    "true",
    "\"\"",
    "\"x\"",
    "\"::\"",
    "\"256.1.1.1\"",
    "\"10.0.0.1/33\"",
    "\"\\u0000\"",
    "[]",
    "[\"\"]",
    "[1, \"a\"]",
    "{}",
    "{ a = 1 }",
    "\"[[vservice]]\"",
];

fn edit() -> impl Strategy<Value = Edit> {
    let index = any::<prop::sample::Index>;
    prop_oneof![
        index().prop_map(Edit::Delete),
        index().prop_map(Edit::Double),
        (index(), index()).prop_map(|(a, b)| Edit::Swap(a, b)),
        (index(), index()).prop_map(|(a, b)| Edit::CutShort(a, b)),
        (index(), prop::sample::select(VALUES)).prop_map(|(a, v)| Edit::Value(a, v)),
        (index(), "[ -~]{0,40}").prop_map(|(a, s)| Edit::Insert(a, s)),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for edit in edits {
        if lines.is_empty() {
            break;
        }
        let n = lines.len();
        match edit {
            Edit::Delete(i) => {
                lines.remove(i.index(n));
            }
            Edit::Double(i) => {
                let line = lines[i.index(n)].clone();
                lines.insert(i.index(n), line);
            }
            Edit::Swap(a, b) => lines.swap(a.index(n), b.index(n)),
            Edit::CutShort(i, at) => {
                let line = &mut lines[i.index(n)];
                let cut = at.index(line.len() + 1);
                let cut = (0..=cut)
                    .rev()
                    .find(|&c| line.is_char_boundary(c))
                    .unwrap_or(0);
                line.truncate(cut);
            }
            Edit::Value(i, value) => {
                let line = &mut lines[i.index(n)];
                if let Some(eq) = line.find('=') {
                    line.truncate(eq + 1);
                    line.push(' ');
                    line.push_str(value);
                }
            }
            Edit::Insert(i, text) => lines.insert(i.index(n + 1), text.clone()),
        }
    }
    lines.join("\n")
}

/// Parses `text`; every reported problem must point inside it and say something.
fn parses_or_explains(text: &str) -> Result<(), TestCaseError> {
    let lines = text.lines().count().max(1);
    if let Err(e) = lb::config::parse(text, "example.toml") {
        prop_assert!(!e.errors.is_empty(), "a rejection names its problems");
        for issue in &e.errors {
            prop_assert!(
                issue.line >= 1 && issue.line <= lines + 1,
                "line {} outside a file of {} lines: {}",
                issue.line,
                lines,
                issue
            );
            prop_assert!(!issue.message.trim().is_empty(), "{}", issue);
        }
    }
    Ok(())
}

#[test]
fn the_example_parses() {
    let cfg = lb::config::parse(EXAMPLE, "example.toml");
    assert!(
        cfg.is_ok(),
        "{}",
        cfg.err().map(|e| e.to_string()).unwrap_or_default()
    );
}

proptest! {
    #[test]
    fn any_edit_of_the_example_parses_or_names_its_problems(
        edits in prop::collection::vec(edit(), 1..6),
    ) {
        parses_or_explains(&apply(EXAMPLE, &edits))?;
    }

    #[test]
    fn any_text_parses_or_names_its_problems(text in "(?s).{0,400}") {
        parses_or_explains(&text)?;
    }
}
