//! M16 dynamic tool-limit detection from an upstream's refusal text.

/// M16 dynamic tool-limit detection: an error that says the request offered too many tools
/// gives the limit it names (the first number in the message below `tools_sent`), else one
/// less than was sent. `None` when the error is about something else or no tools were sent.
pub fn tool_limit(status: u16, body: &str, tools_sent: usize) -> Option<u32> {
    if !matches!(status, 400 | 413 | 422) || tools_sent == 0 {
        return None;
    }
    let lower = body.to_ascii_lowercase();
    let about_tools = [
        "too many tools",
        "maximum number of tools",
        "max number of tools",
        "tools exceeds",
        "number of tools",
        "tool count",
        "tools: array too long",
        "'tools': array too long",
        "tools array too long",
    ]
    .iter()
    .any(|m| lower.contains(m));
    if !about_tools {
        return None;
    }
    let sent = u64::try_from(tools_sent).unwrap_or(u64::MAX);
    let named = lower
        .split(|c: char| !c.is_ascii_digit())
        .filter(|t| !t.is_empty() && t.len() <= 9)
        .filter_map(|t| t.parse::<u64>().ok())
        .find(|n| *n > 0 && *n < sent);
    let limit = named.unwrap_or(sent.saturating_sub(1));
    u32::try_from(limit).ok()
}
