"""Content types in, Markdown-ish text out: the one text shape the chunker reads.

    text/plain     as is (headings are not interpreted; lists, tables, code still count)
    text/markdown  as is
    text/html      tags stripped with `html.parser`; h1–h6 become `#` headings, li becomes
                   `- ` items, table rows become `| a | b |`, pre becomes a ``` fence;
                   script/style/template/head content is dropped.
"""
from __future__ import annotations

import re
from html.parser import HTMLParser

CONTENT_TYPES: dict[str, str] = {
    "": "plain",
    "text/plain": "plain",
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/html": "html",
}
ACCEPTED = "text/plain, text/markdown, text/html"


def content_kind(content_type: str) -> str | None:
    """'plain' | 'markdown' | 'html' for a MIME type (parameters such as charset ignored)."""
    return CONTENT_TYPES.get(content_type.split(";", 1)[0].strip().lower())


def to_text(content: str, kind: str) -> str:
    """The document as text the chunker understands (`kind` from `content_kind`)."""
    text = content.replace("\r\n", "\n").replace("\r", "\n")
    if kind == "html":
        return html_to_markdown(text)
    return text


_SKIP = {"script", "style", "template", "head", "noscript", "svg"}
_BLOCK = {"p", "div", "section", "article", "header", "footer", "main", "aside", "nav",
          "blockquote", "ul", "ol", "dl", "table", "thead", "tbody", "form", "figure", "hr"}
_SPACES = re.compile(r"[ \t\f\v]+")


class _HtmlToMarkdown(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self._skip = 0
        self._pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self._skip += 1
        elif self._skip:
            return
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self.out.append("\n\n" + "#" * int(tag[1]) + " ")
        elif tag == "pre":
            self._pre += 1
            self.out.append("\n\n```\n")
        elif tag == "li":
            self.out.append("\n- ")
        elif tag == "tr":
            self.out.append("\n|")
        elif tag in ("td", "th"):
            self.out.append(" ")
        elif tag == "br":
            self.out.append("\n")
        elif tag in _BLOCK or tag in ("dt", "dd"):
            self.out.append("\n\n")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "br" and not self._skip:
            self.out.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self._skip = max(0, self._skip - 1)
        elif self._skip:
            return
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
                self.out.append("\n\n")
        elif tag == "pre":
            self._pre = max(0, self._pre - 1)
            self.out.append("\n```\n\n")
        elif tag in ("td", "th"):
            self.out.append(" |")
        elif tag == "table" or tag in _BLOCK:
            self.out.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._pre:
            self.out.append(data)
        else:
            self.out.append(_SPACES.sub(" ", data.replace("\n", " ")))


def html_to_markdown(html: str) -> str:
    parser = _HtmlToMarkdown()
    parser.feed(html)
    parser.close()
    lines: list[str] = []
    in_fence = False
    for line in "".join(parser.out).split("\n"):
        if line.strip() == "```":
            in_fence = not in_fence
            lines.append("```")
        else:
            lines.append(line.rstrip() if in_fence else line.strip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
