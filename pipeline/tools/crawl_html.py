"""Realistic HTML pages around real text, for the crawl sample and the crawl benchmark corpus.

`page(site, title, text, related)` wraps a document's text (paragraphs, changelog
entries, bullet lists, preformatted blocks) in one of a few site templates: a cookie banner,
header with navigation and search, breadcrumb, the article, a sidebar of related links, a footer,
scripts and styles: the boilerplate a main-content extractor should leave out. The same text on
two sites differs only in that boilerplate. Deterministic: the output depends only on the
arguments.
"""

from __future__ import annotations

import html
import json
import random
import re
from dataclasses import dataclass

import xxhash

# A Debian changelog entry's first line: "package (version) distribution; urgency=..."
_ENTRY = re.compile(r"^[a-z0-9][a-z0-9+.~-]* \([^)]*\) [^;\n]*;")
_BULLET = re.compile(r"^\s*([*+\-o•])\s+")
_SIGNATURE = re.compile(r"^\s*-- \S")
_BLANK = re.compile(r"\n[ \t]*\n\s*")


@dataclass(frozen=True)
class Site:
    host: str
    name: str
    template: str  # docs | licenses | forum
    nav: tuple[str, ...]
    tagline: str


SITES = {
    "packages": Site(
        "packages.example.org", "Example Package Docs", "docs",
        ("Home", "Packages", "Changelogs", "News", "Search", "About"),
        "Documentation of free software packages, mirrored for reading",
    ),
    "mirror": Site(
        "docs-mirror.example.com", "DocMirror", "docs",
        ("Start", "Browse", "Recent", "Donate", "Help"),
        "A mirror of package documentation",
    ),
    "licenses": Site(
        "licenses.example.net", "Example Licence Library", "licenses",
        ("Licences", "Copyright files", "FAQ", "Contact"),
        "Licence texts and copyright statements of free software",
    ),
    "forum": Site(
        "forum.example.com", "Example Forum", "forum",
        ("Forum", "Latest", "Top", "Categories", "Log in", "Sign up"),
        "Release notes and discussion",
    ),
}  # fmt: skip


def blocks(text: str) -> list[str]:
    """The text as HTML blocks: a changelog entry's header line an <h2>, its items a list, its
    sign-off line a <p class="signature">, runs of bullet lines a <ul>, indented blocks <pre>,
    other paragraphs <p> (their line breaks kept: HTML renders them as spaces)."""
    out: list[str] = []
    for para in _BLANK.split(text.strip("\n")):
        lines = para.splitlines()
        if _ENTRY.match(lines[0]):
            out.append(f"<h2>{html.escape(lines[0].strip())}</h2>")
            lines = lines[1:]
        if (
            lines
            and all(_BULLET.match(x) or x.startswith("    ") for x in lines)
            and _BULLET.match(lines[0])
        ):
            out.append(_list(lines))
        elif lines and sum(x.startswith(("  ", "\t")) for x in lines) == len(lines) > 2:
            out.append(f"<pre>{html.escape(chr(10).join(lines))}</pre>")
        else:
            body, sign = (
                [x for x in lines if not _SIGNATURE.match(x)],
                [x for x in lines if _SIGNATURE.match(x)],
            )
            if body:
                out.append(f"<p>{html.escape(chr(10).join(x.strip() for x in body))}</p>")
            for x in sign:
                out.append(f'<p class="signature">{html.escape(x.strip())}</p>')
    return out


def _list(lines: list[str]) -> str:
    items: list[str] = []
    for line in lines:
        if _BULLET.match(line):
            items.append(_BULLET.sub("", line).strip())
        elif items:
            items[-1] += " " + line.strip()
    return "<ul>\n" + "\n".join(f"  <li>{html.escape(i)}</li>" for i in items) + "\n</ul>"


def _head(title: str, site: Site, charset: str | None) -> str:
    meta = f'<meta charset="{charset}">\n' if charset else ""
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n{meta}'
        f"<title>{html.escape(title)} | {site.name}</title>\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="description" content="{html.escape(site.tagline)}">\n'
        '<link rel="stylesheet" href="/static/css/site.min.css">\n'
        "<style>.cookie-consent{position:fixed;bottom:0;width:100%}.sidebar{float:right}</style>\n"
        "<script>window.dataLayer=window.dataLayer||[];function gtag(){dataLayer.push(arguments)}"
        "gtag('js',new Date());gtag('config','G-EXAMPLE');</script>\n</head>\n"
    )


def _chrome_top(site: Site, crumbs: list[str]) -> str:
    nav = "".join(f'<li><a href="/{n.lower().replace(" ", "-")}/">{n}</a></li>' for n in site.nav)
    trail = "".join(f'<li><a href="#">{html.escape(c)}</a></li>' for c in crumbs)
    return (
        '<body>\n<div id="cookie-banner" class="cookie-consent" role="dialog">We use cookies to '
        'understand how our pages are read. <a href="/privacy/">Learn more</a> '
        "<button>Accept all</button> <button>Reject</button></div>\n"
        f'<header class="site-header">\n<a class="logo" href="/">{site.name}</a>\n'
        f'<nav class="main-nav" aria-label="main"><ul>{nav}</ul></nav>\n'
        '<form class="search" action="/search"><input name="q" placeholder="Search">'
        "<button>Go</button></form>\n</header>\n"
        f'<nav class="breadcrumb" aria-label="breadcrumb"><ol>{trail}</ol></nav>\n'
    )


def _chrome_bottom(site: Site, related: list[tuple[str, str]], year: int) -> str:
    links = "".join(f'<li><a href="{u}">{html.escape(t)}</a></li>' for u, t in related)
    return (
        f'<aside class="sidebar"><h3>Related pages</h3><ul>{links}</ul>\n'
        '<div class="ad-slot">Advertisement</div></aside>\n'
        f'<footer class="site-footer">\n<p>&copy; {year} {site.name}. {site.tagline}. '
        "Texts remain under the licences of their authors.</p>\n"
        '<ul class="footer-links"><li><a href="/privacy/">Privacy</a></li>'
        '<li><a href="/terms/">Terms of use</a></li><li><a href="/contact/">Contact</a></li>'
        '<li><a href="/feed.xml">RSS</a></li></ul>\n</footer>\n'
        '<script src="/static/js/site.min.js" defer></script>\n</body>\n</html>\n'
    )


def page(
    site: Site,
    title: str,
    text: str,
    related: list[tuple[str, str]],
    charset: str | None = "utf-8",
    padding: tuple[str, str] = ("", ""),
) -> str:
    """A whole HTML page for `text` on `site` (charset: the <meta charset>, None for none;
    padding: markup put at the end of <head> and of <body>, see `heavy_boilerplate`).
    The article's small variations (date, reading time, forum user names) are drawn from the
    text alone, so the same text on two sites differs only in the chrome around it."""
    rng = random.Random(xxhash.xxh3_64_intdigest(f"{title}\x00{text}".encode()))
    year = 2021 + xxhash.xxh3_64_intdigest(site.host.encode()) % 4
    crumbs = [site.nav[0], site.nav[1], title]
    if site.template == "forum":
        article = _thread(title, text, rng)
    else:
        updated = f"{rng.randint(2019, 2024)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        toc = ""
        body = blocks(text)
        heads = [b for b in body if b.startswith("<h2>")]
        if site.template == "licenses" and len(heads) > 1:
            toc = (
                '<nav class="toc"><h3>Contents</h3><ol>'
                + "".join(f"<li>{h[4:-5]}</li>" for h in heads[:12])
                + "</ol></nav>\n"
            )
        article = (
            f'<main id="content">\n<article>\n<h1>{html.escape(title)}</h1>\n'
            f'<p class="meta">Last updated {updated} · {rng.randint(2, 40)} min read</p>\n'
            f"{toc}" + "\n".join(body) + "\n</article>\n</main>\n"
        )
    head = _head(title, site, charset).replace("</head>\n", padding[0] + "</head>\n")
    bottom = _chrome_bottom(site, related, year).replace("</body>", padding[1] + "</body>")
    return head + _chrome_top(site, crumbs) + article + bottom


def heavy_boilerplate(rng: random.Random, names: list[str], kb: int) -> tuple[str, str]:
    """About `kb` KB of what a real page carries besides its text, as (end of <head>, end of
    <body>): inline CSS, minified-looking scripts, JSON-LD, inline SVG icons, and a mega menu
    and link-heavy footer over `names` (e.g. package names). Common Crawl's HTML pages are tens
    of KB for a few KB of text; an extractor's cost grows with the markup, not the text."""
    css, js, menu = [], [], []
    target = kb * 1000
    size = 0
    while size < target * 0.35:
        cls = f".{rng.choice(names)}-{rng.randrange(999)}"
        rule = f"{cls}{{margin:{rng.randrange(40)}px;color:#{rng.randrange(16**6):06x};" \
               f"display:{rng.choice(('flex', 'block', 'grid'))}}}"  # fmt: skip
        css.append(rule)
        size += len(rule)
    while size < target * 0.75:
        name, step = rng.choice(names), rng.randrange(97)
        fn = (f"function {name.replace('-', '_')}{rng.randrange(999)}(a,b){{var c=a."
              f"querySelectorAll('.{name}');for(var i=0;i<c.length;i++){{c[i].setAttribute("
              f"'data-x',b+i*{step})}}return c.length}}")  # fmt: skip
        js.append(fn)
        size += len(fn)
    while size < target:
        name = rng.choice(names)
        item = (f'<li class="menu-item"><a href="/{name}/"><svg width="16" height="16" '
                f'viewBox="0 0 16 16"><path d="M{rng.randrange(16)} {rng.randrange(16)}'
                f'l4 4-4 4"/></svg>{name}</a></li>')  # fmt: skip
        menu.append(item)
        size += len(item)
    ld = json.dumps({"@context": "https://schema.org", "@type": "WebSite",
                     "name": rng.choice(names)})  # fmt: skip
    head = (f"<style>{''.join(css)}</style>\n<script>{';'.join(js)}</script>\n"
            f'<script type="application/ld+json">{ld}</script>\n')  # fmt: skip
    body = f'<nav class="mega-menu" aria-label="all packages"><ul>{"".join(menu)}</ul></nav>\n'
    return head, body


def _thread(title: str, text: str, rng: random.Random) -> str:
    """A forum thread: the text's paragraphs as posts of a few users, each with its chrome."""
    paras = [p for p in _BLANK.split(text.strip("\n")) if p.strip()]
    posts, users = [], [f"user{rng.randint(100, 9999)}" for _ in range(3)]
    per_post = max(1, len(paras) // 3)
    for i in range(0, len(paras), per_post):
        who = users[(i // per_post) % len(users)]
        body = "\n".join(blocks("\n\n".join(paras[i : i + per_post])))
        posts.append(
            f'<div class="post" id="post-{i // per_post + 1}">\n'
            f'<div class="post-author"><a href="/u/{who}">{who}</a> '
            f'<span class="badge">Regular</span></div>\n<div class="post-body">\n{body}\n</div>\n'
            f'<div class="post-actions"><a href="#">Reply</a> <a href="#">Quote</a> '
            f'<a href="#">Report</a> <span class="likes">{rng.randint(0, 30)} likes</span></div>'
            "\n</div>"
        )
    return (
        f'<main id="content">\n<h1>{html.escape(title)}</h1>\n<div class="thread">\n'
        + "\n".join(posts)
        + '\n</div>\n<div class="reply-box">You must log in to reply.</div>\n</main>\n'
    )


def error_page(site: Site, status: int, message: str) -> str:
    """A server's error page with the site's chrome around a one-line message."""
    return (
        _head(f"{status} {message}", site, "utf-8") + _chrome_top(site, [site.nav[0]])
        + f'<main id="content"><h1>{status} {html.escape(message)}</h1>\n'
        "<p>The page you asked for is not here. Try the search box or go back to the "
        '<a href="/">home page</a>.</p></main>\n' + _chrome_bottom(site, [], 2024)
    )  # fmt: skip
