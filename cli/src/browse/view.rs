//! Drawing: a pure function of the app's state.
//!
//! Layout: a title line (server and connection), the tree on the left, the
//! selected node's stat, ACL and data on the right, and a status line
//! (messages, the search box, key hints). Dialogs (help, delete
//! confirmation, editor) are drawn over the middle. Every size is computed
//! with saturating arithmetic and clamped to the frame, so any terminal size
//! draws, however small. Names, ACLs and data go through `data::human`, so
//! nothing read from the server can send escape sequences to the terminal.

use arbor_client::{ConnectionState, Stat};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};
use ratatui::Frame;

use super::app::{AclDetail, App, Detail, Mode, DATA_KEPT_BYTES_MAX};
use super::keys::HELP;
use super::tree::{self, RowKind, CHILDREN_SHOWN_MAX};
use crate::data;
use crate::output::{hex_id, utc_datetime};

/// Indentation per tree level, in cells.
const INDENT: usize = 2;

/// Deepest indentation drawn, in levels: deeper rows line up there, so a
/// deep path still shows its name.
const INDENT_LEVELS_MAX: usize = 16;

/// Width of the label column of the node panel.
const LABEL_WIDTH: usize = 17;

/// The regions of the screen.
struct Areas {
    title: Rect,
    tree: Rect,
    node: Rect,
    status: Rect,
}

fn areas(area: Rect) -> Areas {
    let [title, body, status] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(area);
    let [tree, node] =
        Layout::horizontal([Constraint::Percentage(40), Constraint::Percentage(60)]).areas(body);
    Areas {
        title,
        tree,
        node,
        status,
    }
}

/// How many tree rows fit in a terminal of `size` (for paging).
pub fn tree_rows(size: Rect) -> usize {
    usize::from(areas(size).tree.height.saturating_sub(2))
}

/// Draws the whole screen.
pub fn draw(frame: &mut Frame, app: &App) {
    let areas = areas(frame.area());
    draw_title(frame, app, areas.title);
    draw_tree(frame, app, areas.tree);
    draw_node(frame, app, areas.node);
    draw_status(frame, app, areas.status);
    match app.mode() {
        Mode::Browse | Mode::Search(_) => {}
        Mode::Help => draw_help(frame),
        Mode::ConfirmDelete { path, .. } => draw_confirm(frame, path),
        Mode::Edit {
            path,
            version,
            input,
        } => draw_editor(frame, path, *version, input),
        Mode::Conflict {
            path,
            mine,
            refused,
        } => draw_conflict(frame, app, path, mine, *refused),
    }
}

fn draw_title(frame: &mut Frame, app: &App, area: Rect) {
    let (state, style) = match app.connection() {
        ConnectionState::Connected | ConnectionState::Reconnected => {
            ("connected".to_owned(), Style::new().fg(Color::Green))
        }
        ConnectionState::Suspended => (
            app.outage().map_or_else(
                || "disconnected, reconnecting…".to_owned(),
                |outage| outage.message(std::time::Instant::now()),
            ),
            Style::new().fg(Color::Yellow),
        ),
        ConnectionState::Expired => (
            "session expired: restart arbor browse".to_owned(),
            Style::new().fg(Color::Red),
        ),
        ConnectionState::Closed => ("closed".to_owned(), Style::new().fg(Color::Red)),
    };
    let line = Line::from(vec![
        Span::styled(" arbor browse ", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!(" {} ", app.server())),
        Span::styled(format!(" {state} "), style),
    ]);
    frame.render_widget(Paragraph::new(line), area);
}

fn draw_tree(frame: &mut Frame, app: &App, area: Rect) {
    let block = Block::bordered().title(" Tree ");
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let height = usize::from(inner.height);
    let width = usize::from(inner.width);
    if height == 0 || width == 0 {
        return;
    }
    let rows = app.rows();
    let selected = app.selected();
    // The app's offset, moved only as far as needed to show the selection
    // (the app's idea of the page size may lag a resize).
    let offset = app
        .offset()
        .min(selected)
        .max((selected + 1).saturating_sub(height));
    let lines: Vec<Line> = rows
        .iter()
        .enumerate()
        .skip(offset)
        .take(height)
        .map(|(index, row)| {
            let indent = " ".repeat(INDENT * row.depth.min(INDENT_LEVELS_MAX));
            let mut spans = vec![Span::raw(indent)];
            match &row.kind {
                RowKind::Node(path) => {
                    let node = app.tree().get(path);
                    let children = node
                        .and_then(|node| node.stat)
                        .map(|stat| stat.num_children);
                    let expanded = node.is_some_and(|node| node.expanded);
                    let marker = match (expanded, children) {
                        (true, _) => "▾ ",
                        (false, Some(0)) => "· ",
                        (false, _) => "▸ ",
                    };
                    spans.push(Span::raw(marker));
                    spans.push(Span::raw(data::human(tree::name_of(path).as_bytes())));
                    if let (false, Some(count @ 1..)) = (expanded, children) {
                        spans.push(Span::styled(
                            format!(" ({count})"),
                            Style::new().fg(Color::DarkGray),
                        ));
                    }
                }
                RowKind::More { hidden, .. } => spans.push(Span::styled(
                    format!("… {hidden} more"),
                    Style::new().fg(Color::DarkGray),
                )),
                RowKind::Loading { .. } => {
                    spans.push(Span::styled("loading…", Style::new().fg(Color::DarkGray)))
                }
            }
            let mut line = Line::from(spans);
            if index == selected {
                // Pad so the highlight spans the whole row.
                let used = line.width();
                line.spans
                    .push(Span::raw(" ".repeat(width.saturating_sub(used))));
                line = line.style(Style::new().add_modifier(Modifier::REVERSED));
            }
            line
        })
        .collect();
    frame.render_widget(Paragraph::new(lines), inner);
}

/// One label/value row of the node panel.
fn field(label: &str, value: String) -> Line<'static> {
    styled_field(label, value, Style::new())
}

/// A label/value row whose value is in `style`.
fn styled_field(label: &str, value: String, style: Style) -> Line<'static> {
    Line::from(vec![
        Span::styled(
            format!("{label:<LABEL_WIDTH$}"),
            Style::new().fg(Color::Cyan),
        ),
        Span::styled(value, style),
    ])
}

fn stat_lines(stat: &Stat) -> Vec<Line<'static>> {
    let owner = if stat.ephemeral_owner == 0 {
        "none (persistent)".to_owned()
    } else {
        format!("{} (ephemeral)", hex_id(stat.ephemeral_owner))
    };
    vec![
        field("czxid", hex_id(stat.czxid)),
        field("mzxid", hex_id(stat.mzxid)),
        field("pzxid", hex_id(stat.pzxid)),
        field("ctime", utc_datetime(stat.ctime_ms)),
        field("mtime", utc_datetime(stat.mtime_ms)),
        field("version", stat.version.to_string()),
        field("cversion", stat.cversion.to_string()),
        field("aversion", stat.aversion.to_string()),
        field("ephemeral_owner", owner),
        field("data_length", format!("{} bytes", stat.data_length)),
        field("num_children", stat.num_children.to_string()),
    ]
}

/// The ACL rows: the first entry beside the label, the others below it.
fn acl_lines(acl: &AclDetail) -> Vec<Line<'static>> {
    let grey = Style::new().fg(Color::DarkGray);
    let entries = match acl {
        AclDetail::Loaded(entries) if !entries.is_empty() => entries,
        AclDetail::Loaded(_) => return vec![styled_field("acl", "(empty)".to_owned(), grey)],
        AclDetail::Loading => return vec![styled_field("acl", "loading…".to_owned(), grey)],
        AclDetail::NotReadable => {
            return vec![styled_field("acl", "(not readable)".to_owned(), grey)]
        }
        AclDetail::Failed(message) => {
            let red = Style::new().fg(Color::Red);
            return vec![styled_field("acl", format!("error: {message}"), red)];
        }
    };
    entries
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            let label = if index == 0 { "acl" } else { "" };
            // From the server: shown as any other text from it is.
            field(label, data::human(entry.to_string().as_bytes()))
        })
        .collect()
}

/// Data cut at a character boundary, so cutting never turns text into hex.
fn shown_data(data: &[u8]) -> &[u8] {
    match std::str::from_utf8(data) {
        Err(error) if error.error_len().is_none() => &data[..error.valid_up_to()],
        _ => data,
    }
}

fn draw_node(frame: &mut Frame, app: &App, area: Rect) {
    let block = Block::bordered().title(" Node ");
    let mut lines: Vec<Line> = Vec::new();
    let selected_row = app.rows().get(app.selected()).map(|row| &row.kind);
    match (app.detail(), selected_row) {
        (_, Some(RowKind::More { parent, hidden })) => {
            lines.push(field("Path", data::human(parent.as_bytes())));
            lines.push(Line::raw(format!(
                "{hidden} more children are not shown (at most {CHILDREN_SHOWN_MAX} per node)."
            )));
            lines.push(Line::raw("List them with `arbor ls`."));
        }
        (Detail::None, _) => lines.push(Line::raw("No node selected.")),
        (Detail::Loading(path), _) => {
            lines.push(field("Path", data::human(path.as_bytes())));
            lines.push(Line::raw("loading…"));
        }
        (Detail::Failed { path, message }, _) => {
            lines.push(field("Path", data::human(path.as_bytes())));
            lines.push(Line::styled(
                format!("error: {message}"),
                Style::new().fg(Color::Red),
            ));
        }
        (
            Detail::Loaded {
                path,
                data,
                stat,
                acl,
            },
            _,
        ) => {
            lines.push(field("Path", data::human(path.as_bytes())));
            lines.extend(stat_lines(stat));
            lines.extend(acl_lines(acl));
            lines.push(Line::raw(""));
            let cut = data.len() < stat.data_length as usize;
            let mut heading = format!("Data ({} bytes", stat.data_length);
            if cut {
                heading.push_str(&format!(", first {DATA_KEPT_BYTES_MAX} shown"));
            }
            heading.push(')');
            lines.push(Line::styled(heading, Style::new().fg(Color::Cyan)));
            let text = data::human(shown_data(data)).replace('\t', "    ");
            lines.extend(text.lines().map(|line| Line::raw(line.to_owned())));
        }
    }
    let paragraph = Paragraph::new(Text::from(lines))
        .block(block)
        .wrap(Wrap { trim: false });
    frame.render_widget(paragraph, area);
}

fn draw_status(frame: &mut Frame, app: &App, area: Rect) {
    if let Mode::Search(input) = app.mode() {
        let width = usize::from(area.width.saturating_sub(1));
        let (shown, cursor) = input.window(width);
        frame.render_widget(Paragraph::new(format!("/{shown}")), area);
        set_cursor(frame, area, 1 + cursor);
        return;
    }
    let line = match app.status() {
        Some(status) if status.error => {
            Line::styled(status.text.clone(), Style::new().fg(Color::Red))
        }
        Some(status) => Line::raw(status.text.clone()),
        None => Line::styled(
            "? help  / search  e edit  d delete  r reload  q quit",
            Style::new().fg(Color::DarkGray),
        ),
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// A `width`×`height` rectangle centred in `area`, cut to fit.
fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let width = width.min(area.width);
    let height = height.min(area.height);
    Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    }
}

fn draw_help(frame: &mut Frame) {
    let mut lines: Vec<Line> = HELP
        .iter()
        .map(|(keys, what)| {
            Line::from(vec![
                Span::styled(format!("{keys:<16}"), Style::new().fg(Color::Cyan)),
                Span::raw(*what),
            ])
        })
        .collect();
    lines.push(Line::raw(""));
    lines.push(Line::raw("Search covers loaded (expanded) nodes only."));
    lines.push(Line::raw("Any key closes this help."));
    let height = u16::try_from(lines.len() + 2).unwrap_or(u16::MAX);
    let area = centered(frame.area(), 62, height);
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" Keys ")),
        area,
    );
}

fn draw_confirm(frame: &mut Frame, path: &str) {
    let text = format!("Delete {}? y/n", data::human(path.as_bytes()));
    let width = u16::try_from(text.chars().count() + 4).unwrap_or(u16::MAX);
    let area = centered(frame.area(), width.max(24), 3);
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(text)
            .block(Block::bordered().title(" Confirm "))
            .wrap(Wrap { trim: false }),
        area,
    );
}

fn draw_editor(frame: &mut Frame, path: &str, version: i32, input: &super::input::LineInput) {
    let screen = frame.area();
    let area = centered(screen, screen.width.saturating_sub(4).max(1), 4);
    let title = format!(
        " Edit {} (version {version}) ",
        data::human(path.as_bytes())
    );
    let block = Block::bordered().title(title);
    let inner = block.inner(area);
    frame.render_widget(Clear, area);
    frame.render_widget(block, area);
    let [line_area, hint_area] =
        Layout::vertical([Constraint::Length(1), Constraint::Length(1)]).areas(inner);
    let (shown, cursor) = input.window(usize::from(line_area.width));
    frame.render_widget(Paragraph::new(shown), line_area);
    frame.render_widget(
        Paragraph::new(Line::styled(
            "Enter save · Esc cancel",
            Style::new().fg(Color::DarkGray),
        )),
        hint_area,
    );
    set_cursor(frame, line_area, cursor);
}

/// The server's version beside the user's, and the three ways on.
fn draw_conflict(frame: &mut Frame, app: &App, path: &str, mine: &str, refused: i32) {
    let theirs = match (app.detail(), app.conflict_version(path, refused)) {
        (Detail::Loaded { data, .. }, Some(version)) => {
            format!("server (version {version}): {}", data::human(data))
        }
        _ => "server: reading the new version…".to_owned(),
    };
    let lines = vec![
        Line::raw(theirs),
        Line::raw(format!("yours:  {mine}")),
        Line::styled(
            "o overwrite with yours · e edit yours again · r keep the server's",
            Style::new().fg(Color::DarkGray),
        ),
    ];
    let screen = frame.area();
    let area = centered(screen, screen.width.saturating_sub(4).max(1), 5);
    let title = format!(
        " {} changed while you edited it ",
        data::human(path.as_bytes())
    );
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(title)),
        area,
    );
}

/// Puts the terminal cursor `column` cells into `area`, if that is inside.
fn set_cursor(frame: &mut Frame, area: Rect, column: usize) {
    if area.width == 0 || area.height == 0 {
        return;
    }
    let column = u16::try_from(column).unwrap_or(u16::MAX);
    if column < area.width {
        frame.set_cursor_position((area.x + column, area.y));
    }
}
