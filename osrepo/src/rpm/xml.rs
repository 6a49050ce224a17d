//! Small helpers over quick-xml for repository metadata.

use std::borrow::Cow;

use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

/// An attribute's unescaped value.
pub(crate) fn attr(e: &BytesStart<'_>, name: &str) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.as_ref() == name.as_bytes())
        .and_then(|a| a.unescape_value().ok().map(Cow::into_owned))
}

/// The text up to the end of the current element (entities resolved), bounded.
pub(crate) fn text(reader: &mut Reader<&[u8]>) -> Result<String, String> {
    let mut out = String::new();
    loop {
        match reader.read_event().map_err(|e| e.to_string())? {
            Event::Text(t) => out.push_str(&t.decode().map_err(|e| e.to_string())?),
            Event::CData(t) => out.push_str(&String::from_utf8_lossy(&t)),
            Event::GeneralRef(r) => {
                let name = r.decode().map_err(|e| e.to_string())?;
                match r.resolve_char_ref().map_err(|e| e.to_string())? {
                    Some(c) => out.push(c),
                    None => match quick_xml::escape::resolve_predefined_entity(&name) {
                        Some(s) => out.push_str(s),
                        None => return Err(format!("unknown entity `&{name};`")),
                    },
                }
            }
            Event::End(_) => return Ok(out),
            Event::Eof => return Err("unexpected end of document".into()),
            Event::Start(_) => return Err("element inside a text element".into()),
            _ => {}
        }
        if out.len() > 1 << 20 {
            return Err("text longer than 1 MiB".into());
        }
    }
}
