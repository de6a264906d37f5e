//! Every rendering of a report, in one place: the terminal table
//! ([`Table`]), Markdown ([`markdown`]), the HTML page ([`html`]), JUnit
//! XML ([`junit`]) and the JSON envelope ([`json`]), all from the one
//! report model ([`crate::report`]), and the rules that keep text read from
//! files (kernel names, workload names, volatile values) from driving a
//! terminal, forging lines or breaking a document.
//!
//! A [`Table`] pads by character count (never by a formatter width, which
//! panics past 65,535), caps every column but the last, and wraps the last
//! column under itself when a terminal width is given, so no cell is ever
//! cut off and a row's first columns (the verdict) are always visible.

use std::borrow::Cow;

pub mod audit;
pub mod census;
pub mod compare;
pub mod html;
pub mod json;
pub mod junit;
pub mod kernel_name;
pub mod markdown;
pub mod refusal;

/// Widest a capped column grows; longer cells are shortened in the middle.
pub const MAX_CELL: usize = 64;

/// Whether `c` must not reach a terminal raw: control characters (C0, DEL,
/// C1), bidirectional embeddings, overrides and isolates, and the line and
/// paragraph separators (which some terminals and viewers treat as
/// newlines), and the noncharacters (U+FDD0-U+FDEF and the last two code
/// points of every plane), which no text should carry.
pub fn is_unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200E}' | '\u{200F}' | '\u{061C}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
                | '\u{2028}' | '\u{2029}'
        )
        || is_noncharacter(c)
}

/// U+FDD0-U+FDEF, and U+xFFFE and U+xFFFF of every plane.
pub fn is_noncharacter(c: char) -> bool {
    let c = c as u32;
    (0xFDD0..=0xFDEF).contains(&c) || c & 0xFFFE == 0xFFFE
}

/// One line of text for a terminal or a table cell: every unsafe
/// character, newlines and tabs included, is shown escaped (`\u{1b}`).
pub fn one_line(s: &str) -> Cow<'_, str> {
    escape(s, is_unsafe_char)
}

/// Text for a terminal that may span lines: like [`one_line`], but
/// newlines and tabs stay.
pub fn terminal_text(s: &str) -> Cow<'_, str> {
    escape(s, |c| is_unsafe_char(c) && c != '\n' && c != '\t')
}

/// `s` with every character `unsafe_here` picks shown as its escape.
fn escape(s: &str, unsafe_here: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !s.chars().any(&unsafe_here) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(
        s.chars()
            .map(|c| {
                if unsafe_here(c) {
                    c.escape_unicode().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

/// Whether XML 1.0 allows `c` in a document at all (escaped or not).
pub fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}')
        || c >= '\u{10000}'
}

pub(crate) fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            // Control characters (C0, DEL, C1) are not text: XML 1.0 forbids
            // most of them even escaped, and U+FFFE / U+FFFF outright; bidi
            // overrides would reorder what a reader sees.
            '\n' | '\t' => o.push(c),
            c if !is_xml_char(c) || is_unsafe_char(c) => o.push(' '),
            c => o.push(c),
        }
    }
    o
}

/// `s` with its first letter upper-case (a sentence of a report).
pub fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// `s` shortened to at most `max` characters, cut in the middle with `…`
/// so both ends (a GEMM name's layer and its batch) stay readable.
pub fn shorten(s: &str, max: usize) -> Cow<'_, str> {
    let n = s.chars().count();
    if n <= max || max < 3 {
        return Cow::Borrowed(s);
    }
    let head = (max - 1) / 2;
    let tail = max - 1 - head;
    let mut out: String = s.chars().take(head).collect();
    out.push('…');
    out.extend(s.chars().skip(n - tail));
    Cow::Owned(out)
}

/// What to put before and after a cell of a column: `paint(column, text)`.
pub type Paint<'a> = dyn Fn(usize, &str) -> Option<(String, String)> + 'a;

/// A table of rows under headers, rendered as aligned text.
#[derive(Debug, Clone)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
    caps: Vec<usize>,
}

impl Table {
    /// A table with these column headers; every column but the last is
    /// capped at [`MAX_CELL`] characters.
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            caps: vec![MAX_CELL; headers.len()],
        }
    }

    /// Caps column `column` at `width` characters (longer cells are
    /// shortened in the middle).
    pub fn cap(mut self, column: usize, width: usize) -> Table {
        if let Some(c) = self.caps.get_mut(column) {
            *c = width.max(3);
        }
        self
    }

    /// Adds a row; missing cells are empty, extra cells are dropped.
    pub fn row<S: AsRef<str>>(&mut self, cells: &[S]) {
        let mut row: Vec<String> = cells
            .iter()
            .take(self.headers.len())
            .map(|c| one_line(c.as_ref()).into_owned())
            .collect();
        row.resize(self.headers.len(), String::new());
        self.rows.push(row);
    }

    /// The rows added so far.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True when no row was added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as text, one line per row (more when the last column
    /// wraps). With `width` (a terminal's columns) the last column wraps
    /// under itself at word boundaries where it would pass the edge; it is
    /// never cut.
    pub fn render(&self, width: Option<usize>) -> String {
        self.render_painted(width, &|_, _| None)
    }

    /// [`Table::render`], with `paint(column, cell)` giving the text to put
    /// before and after a body cell (a terminal colour, say); the padding
    /// stays outside it, so the columns still line up.
    pub fn render_painted(&self, width: Option<usize>, paint: &Paint<'_>) -> String {
        let last = self.headers.len().saturating_sub(1);
        // On a terminal too narrow for a capped cell of the column before
        // the last (a subject), that column is not cut in the middle (rows
        // would read alike): it starts the free text, and the last column
        // follows under it.
        let stacked = width.is_some()
            && last >= 2
            && self
                .rows
                .iter()
                .any(|r| r[last - 1].chars().count() > self.caps[last - 1]);
        let lead = if stacked { last - 1 } else { last };
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(lead) {
                widths[i] = widths[i].max(cell.chars().count().min(self.caps[i]));
            }
        }
        let indent: usize = widths.iter().take(lead).map(|w| w + 2).sum();
        let room = width.map(|w| w.saturating_sub(indent)).filter(|r| *r >= 20);
        let mut out = String::new();
        let mut line = |cells: &[String], body: bool| {
            let mut l = String::new();
            for (i, cell) in cells.iter().enumerate().take(lead) {
                let cell = shorten(cell, self.caps[i]);
                match body.then(|| paint(i, &cell)).flatten() {
                    Some((before, after)) => {
                        l.push_str(&before);
                        l.push_str(&cell);
                        l.push_str(&after);
                    }
                    None => l.push_str(&cell),
                }
                let pad = widths[i] + 2 - cell.chars().count();
                l.extend(std::iter::repeat_n(' ', pad));
            }
            let mut wrapped: Vec<String> = Vec::new();
            if stacked && !body {
                wrapped.push(format!("{}, then {}", cells[last - 1], cells[last]));
            } else {
                for text in &cells[lead..] {
                    wrapped.extend(wrap(text, room));
                }
            }
            let mut wrapped = wrapped.into_iter();
            l.push_str(&wrapped.next().unwrap_or_default());
            for more in wrapped {
                l.push('\n');
                l.extend(std::iter::repeat_n(' ', indent));
                l.push_str(&more);
            }
            out.push_str(l.trim_end());
            out.push('\n');
        };
        line(&self.headers, false);
        for row in &self.rows {
            line(row, true);
        }
        out
    }
}

/// `s` in lines of at most `room` characters, broken at spaces (only a
/// word longer than the room is broken inside); one line when `room` is
/// `None`.
fn wrap(s: &str, room: Option<usize>) -> Vec<String> {
    let Some(room) = room else {
        return vec![s.to_string()];
    };
    let mut lines = Vec::new();
    let mut rest: Vec<char> = s.chars().collect();
    while rest.len() > room {
        let cut = rest[..=room]
            .iter()
            .rposition(|c| *c == ' ')
            .filter(|&i| i > 0)
            .unwrap_or(room);
        lines.push(
            rest[..cut]
                .iter()
                .collect::<String>()
                .trim_end()
                .to_string(),
        );
        rest = rest[cut..]
            .iter()
            .copied()
            .skip_while(|c| *c == ' ')
            .collect();
    }
    lines.push(rest.into_iter().collect());
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_capped_padded_by_characters_and_never_panic() {
        let mut t = Table::new(&["VERDICT", "SUBJECT", "DETAIL"]);
        t.row(&["PASS", &"x".repeat(70_000), "ok"]);
        t.row(&["FAIL", "é", "tail"]);
        let s = t.render(None);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[1].starts_with("PASS     x"), "{}", lines[1]);
        assert!(lines[1].contains('…') && lines[1].chars().count() < 100);
        // Aligned by characters, not bytes: "é" is two bytes.
        let col = |l: &str| l.chars().position(|c| c == 'o' || c == 't').unwrap();
        assert_eq!(col(lines[1]), col(lines[2]));
    }

    #[test]
    fn the_last_column_wraps_under_itself_and_is_never_cut() {
        let mut t = Table::new(&["V", "DETAIL"]);
        let detail = "one two three four five six seven eight nine ten eleven twelve";
        t.row(&["FAIL", detail]);
        let s = t.render(Some(30));
        assert!(s.lines().all(|l| l.chars().count() <= 30), "{s}");
        let joined: Vec<&str> = s.lines().skip(1).map(str::trim).collect();
        assert_eq!(joined.join(" "), format!("FAIL  {detail}"));
        // Continuation lines start under the detail column.
        let next = s.lines().nth(2).unwrap();
        assert!(
            next.starts_with("      ") && !next[6..].starts_with(' '),
            "{s}"
        );
        assert!(s.lines().nth(1).unwrap().starts_with("FAIL"));
        // Without a width, one line.
        assert_eq!(t.render(None).lines().count(), 2);
    }

    #[test]
    fn hostile_text_is_escaped_on_one_line() {
        let s = "a\u{1b}[31m\nb\u{202E}c\u{2028}d";
        let o = one_line(s);
        assert!(!o.chars().any(is_unsafe_char), "{o}");
        assert!(o.contains("\\u{1b}") && o.contains("\\u{202e}") && o.contains("\\u{a}"));
        assert_eq!(terminal_text("x\ny\tz"), "x\ny\tz");
        assert!(!terminal_text("\u{2066}").contains('\u{2066}'));
        assert!(!is_xml_char('\u{FFFE}') && !is_xml_char('\u{FFFF}') && !is_xml_char('\u{1}'));
        assert!(is_xml_char('é') && is_xml_char('\u{10000}'));
        assert_eq!(shorten("abcdefghij", 5), "ab…ij");
    }

    #[test]
    fn xml_escaping() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&apos;"
        );
        assert_eq!(esc("a\u{1b}[31m\u{85}"), "a [31m ");
        // Not XML at all, or reordering what a reader sees: replaced.
        assert_eq!(esc("x\u{FFFE}y\u{FFFF}z\u{202E}w"), "x y z w");
        assert_eq!(esc("line\nnext\tcol"), "line\nnext\tcol");
    }
}
