"""HTML made from submissions, sanitised: nothing a student writes runs as script where it is viewed.

The formgrader (the instructor's manual-grading view) and nbgrader's feedback HTML render
submissions with nbconvert's `HTMLExporter`. nbgrader's own templates render Markdown cells as
``cell.source | markdown2html`` with no sanitising at all, even with nbconvert's
``HTMLExporter.sanitize_html`` on, so a written answer holding ``<script>`` or
``<img onerror=...>`` runs in the instructor's browser, on the formgrader's origin, where it can
call the formgrader's API and change grades. nbgrader_config.py therefore configures the exporter
(every `HTMLExporter` an nbgrader command or the formgrader makes reads it):

* ``sanitize_html = True``: nbconvert passes HTML and Markdown outputs through ``clean_html``
  and leaves out JavaScript outputs and widget state;
* the filters ``markdown2html`` (Markdown cells, Markdown outputs, grader comments) and
  ``clean_html`` (outputs, code input) replaced by the ones below, which render as nbconvert
  does and then keep only an allowlist of tags and attributes with `nh3` (Rust's ammonia):
  paragraphs, headings, lists, emphasis, links, tables, code, images, pygments' ``class``
  attributes; no script, style, iframe, form, event handler or ``javascript:`` URL. Maths is
  text (``$x^2$``) to the sanitiser, and MathJax typesets it in the page as before;
* the preprocessor `SafeOutputs`: output metadata that nbconvert writes into unquoted
  attributes (an image's width and height) is kept only when it is a number, and image data
  only when it is base64.

The course's own reports (course/report.py, course/perfdoc.py) write no submission's text as HTML.
"""
from __future__ import annotations

import re

import nh3
from nbconvert.preprocessors import Preprocessor

try:
    from jinja2 import pass_context
except ImportError:  # jinja2 < 3
    from jinja2 import contextfilter as pass_context

TAGS = {
    "a", "abbr", "b", "blockquote", "br", "caption", "code", "col", "colgroup", "dd", "del", "details",
    "div", "dl", "dt", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins", "kbd", "li",
    "mark", "ol", "p", "pre", "q", "s", "samp", "small", "span", "strike", "strong", "sub", "summary",
    "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "u", "ul", "var",
}
ATTRIBUTES = {
    "*": {"class", "title"},            # class: pygments' highlighting, nbconvert's anchors
    "a": {"href"},
    **{f"h{n}": {"class", "title", "id"} for n in range(1, 7)},   # the targets of heading anchors
    "img": {"src", "alt", "width", "height"},
    "td": {"colspan", "rowspan", "align"},
    "th": {"colspan", "rowspan", "align", "scope"},
    "col": {"span"}, "colgroup": {"span"},
    "ol": {"start"},
    "details": {"open"},
}
URL_SCHEMES = {"http", "https", "mailto", "data"}
_DATA_IMAGE = re.compile(r"data:image/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/=\s]*\Z")
_NUMBER = re.compile(r"\d{1,5}(\.\d{1,3})?(px|%)?\Z")


def _attribute(tag: str, attribute: str, value: str):
    if attribute in ("href", "src") and value.strip().lower().startswith("data:"):
        return value if tag == "img" and _DATA_IMAGE.match(value.strip()) else None
    if attribute in ("width", "height") and not _NUMBER.match(value.strip()):
        return None
    return value


def clean_html(element) -> str:
    """HTML with only the allowed tags and attributes left (a disallowed tag's text stays as
    text; script, style and the like go with their content)."""
    text = element.decode() if isinstance(element, bytes) else str(element)
    return nh3.clean(text, tags=TAGS, attributes=ATTRIBUTES, attribute_filter=_attribute,
                     url_schemes=URL_SCHEMES, link_rel="noopener noreferrer nofollow")


@pass_context
def markdown2html(context, source) -> str:
    """nbconvert's HTMLExporter.markdown2html (maths kept for MathJax, the cell's attachments as
    images, heading anchors), then `clean_html`."""
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
    cell = context.get("cell", {}) or {}
    path = context.get("resources", {}).get("metadata", {}).get("path", "")
    renderer = IPythonRenderer(escape=False, attachments=cell.get("attachments", {}) or {},
                               embed_images=False, path=path, anchor_link_text="¶",
                               exclude_anchor_links=False)
    return clean_html(MarkdownWithMath(renderer=renderer).render(source or ""))


_IMAGES = ("image/png", "image/jpeg", "image/gif", "image/webp")
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*\Z")


class SafeOutputs(Preprocessor):
    """Outputs whose data or metadata nbconvert's templates write into HTML unescaped or into
    unquoted attributes: non-numeric image sizes and non-base64 image data are dropped, and
    so are file names a submission set (nbconvert would link them)."""

    def preprocess_cell(self, cell, resources, index):
        for out in cell.get("outputs", []) or []:
            if out.get("output_type") not in ("display_data", "execute_result"):
                continue
            data, meta = out.get("data", {}), out.get("metadata", {})
            for mime in [m for m in data if m in _IMAGES]:
                if not isinstance(data[mime], str) or not _BASE64.match(data[mime]):
                    del data[mime]
            meta.pop("filenames", None)
            for key in list(meta):
                entry = meta[key] if isinstance(meta[key], dict) else None
                for size in ("width", "height"):
                    for holder in [meta] + ([entry] if entry is not None else []):
                        if size in holder and not _NUMBER.match(str(holder[size])):
                            del holder[size]
        return cell, resources
