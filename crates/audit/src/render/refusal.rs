//! A refusal for a terminal: one line that says why, then each changed
//! field within the width, so a check of a trace
//! from another machine reads as a list, not one line of thousands of
//! characters.

use super::{one_line, shorten};
use crate::Refusal;

/// Widest the lines get when the terminal's width is unknown (a log).
const DEFAULT_WIDTH: usize = 100;
/// Changed fields listed before the rest are counted.
const LISTED: usize = 12;

/// The lines of `refusal`: `refused at <stage>[: route N]: <first field>`
/// (with how many more fields changed), then `origin` (e.g. `recorded on
/// nvidia-h200, this machine is cpu/x86_64`) when given, then each changed
/// field as `  field expected X, found Y` (as [`Refusal`]'s own text) or,
/// where that is wider than `width`, the field and its two values on lines
/// of their own (a value shortened in the middle only where it cannot fit);
/// the first twelve fields and a count of the rest.
///
/// A refusal of one field whose text fits after `lead` columns (what the
/// caller prints before the first line) stays the one line [`Refusal`]'s
/// own text is.
pub fn refusal_lines(
    refusal: &Refusal,
    origin: Option<&str>,
    width: Option<usize>,
    lead: usize,
) -> Vec<String> {
    let width = width.unwrap_or(DEFAULT_WIDTH).max(40);
    let changes = refusal.changes();
    // Only a refusal of one field can be one line: never render a long
    // one whole (a context of 65,536 pins is megabytes of text).
    if changes.len() == 1 && origin.is_none() {
        let whole = one_line(&refusal.to_string()).into_owned();
        if lead + whole.chars().count() <= width {
            return vec![whole];
        }
    }
    let mut head = format!("refused at {}", refusal.stage);
    if let Some(l) = &refusal.label {
        head.push_str(&format!(" of {:?}", l));
    }
    if let Some(i) = refusal.route_index {
        head.push_str(&format!(": route {i}"));
    }
    head.push_str(&format!(": {}", one_line(&changes[0].field)));
    let more = (changes.len() > 1).then(|| format!("and {} more fields", changes.len() - 1));
    let mut lines = Vec::new();
    match more {
        Some(m) if lead + head.chars().count() + 1 + m.chars().count() <= width => {
            lines.push(format!("{head} {m}"));
        }
        Some(m) => {
            lines.push(head);
            lines.push(format!("  {m}"));
        }
        None => lines.push(head),
    }
    if let Some(o) = origin {
        lines.push(format!("  {}", one_line(o)));
    }
    for c in changes.iter().take(LISTED) {
        let field = one_line(&c.field);
        let (expected, found) = (one_line(&c.expected), one_line(&c.found));
        let line = format!("  {field} expected {expected}, found {found}");
        if line.chars().count() <= width {
            lines.push(line);
            continue;
        }
        // Too wide for one line: the field, then each value on its own
        // line, whole where it fits (a digest at 80 columns does), else
        // shortened in the middle.
        let room = width.saturating_sub(13).max(12);
        lines.push(format!("  {field}"));
        lines.push(format!("    expected {}", shorten(&expected, room)));
        lines.push(format!("    found    {}", shorten(&found, room)));
    }
    if changes.len() > LISTED {
        lines.push(format!(
            "  and {} more fields (`--format json` lists every one)",
            changes.len() - LISTED
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::refusal_lines;
    use crate::digest::FieldChange;
    use crate::{Refusal, RefusalStage};

    #[test]
    fn a_long_refusal_is_a_reason_then_one_short_line_a_field() {
        let changes: Vec<FieldChange> = (0..20)
            .map(|i| {
                FieldChange::text(format!("module.field{i}"), "e".repeat(300), "f".repeat(300))
            })
            .collect();
        let r = Refusal::with_changes(RefusalStage::ReplayValidation, None, changes).unwrap();
        for width in [80, 100] {
            let lines = refusal_lines(
                &r,
                Some("recorded on gpu, this machine is cpu"),
                Some(width),
                0,
            );
            assert_eq!(
                lines[0],
                "refused at replay validation: module.field0 and 19 more fields"
            );
            assert_eq!(lines[1], "  recorded on gpu, this machine is cpu");
            assert_eq!(lines.len(), 2 + 3 * 12 + 1);
            assert!(lines.last().unwrap().contains("and 8 more fields"));
            for l in &lines {
                assert!(
                    l.chars().count() <= width,
                    "{} > {width}: {l}",
                    l.chars().count()
                );
            }
        }
    }

    #[test]
    fn a_digest_stays_whole_at_80_columns() {
        let (e, f) = ("4".repeat(64), "c".repeat(64));
        let r = Refusal::new(
            RefusalStage::PlanConstruction,
            None,
            "ordered_digest",
            &e,
            &f,
        );
        let lines = refusal_lines(&r, None, Some(80), 13);
        assert_eq!(lines[1], "  ordered_digest");
        assert_eq!(lines[2], format!("    expected {e}"));
        assert_eq!(lines[3], format!("    found    {f}"));
        assert!(lines.iter().all(|l| l.chars().count() <= 80));
    }

    #[test]
    fn a_short_refusal_keeps_its_values_whole() {
        let r = Refusal::new(
            RefusalStage::PlanConstruction,
            Some(3),
            "dtype",
            "f32",
            "bf16",
        );
        assert_eq!(
            refusal_lines(&r, None, None, 13),
            ["refused at plan construction: route 3: dtype expected f32, found bf16"]
        );
    }
}
