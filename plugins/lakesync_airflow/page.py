"""The status page's frame: Airflow-like styling for light and dark mode, and the self-refresh.

Colours are CSS variables with a light and a dark set. Dark applies when the browser prefers it
(``prefers-color-scheme``) unless Airflow says otherwise: the page is served by Airflow's API server and
shown in an iframe of its UI (same origin), so a few lines of script read Airflow's own colour mode (the
UI's ``chakra-ui-color-mode`` in local storage, or the ``dark``/``light`` class of the parent page) and set
``data-theme``. Without script the media query alone decides.
"""

from __future__ import annotations

LIGHT = {"bg": "#ffffff", "fg": "#1a202c", "muted": "#5f6b7a", "card": "#f7fafc", "border": "#e2e8f0",
         "accent": "#017cee", "ok": "#2f9e44", "bad": "#e03131", "none": "#cbd5e0", "warn": "#f08c00"}
DARK = {"bg": "#101418", "fg": "#e2e8f0", "muted": "#a0aec0", "card": "#1a202c", "border": "#2d3748",
        "accent": "#4dabf7", "ok": "#51cf66", "bad": "#ff6b6b", "none": "#4a5568", "warn": "#ffa94d"}


def _vars(colours: dict[str, str]) -> str:
    return ";".join(f"--{name}:{value}" for name, value in colours.items())


STYLE = (
    f":root{{{_vars(LIGHT)};color-scheme:light}}"
    f"@media (prefers-color-scheme: dark){{:root:not([data-theme=light]){{{_vars(DARK)};color-scheme:dark}}}}"
    f":root[data-theme=dark]{{{_vars(DARK)};color-scheme:dark}}"
    "body{margin:0;padding:16px 24px;background:var(--bg);color:var(--fg);"
    "font:14px/1.45 Inter,system-ui,-apple-system,'Segoe UI',Roboto,sans-serif}"
    "header{display:flex;align-items:baseline;gap:24px}h1{font-size:20px;margin:0 0 8px}"
    "h2{font-size:17px;margin:20px 0 4px}h3{font-size:15px;margin:0 0 8px}"
    "a{color:var(--accent)}nav a{margin:0 4px;text-decoration:none}nav a.on{font-weight:700;text-decoration:underline}"
    ".meta{color:var(--muted);margin:0 0 8px}code,pre{font:12px ui-monospace,Menlo,Consolas,monospace}"
    ".card{background:var(--card);border:1px solid var(--border);border-radius:8px;padding:12px 16px;margin:10px 0}"
    "dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:0 0 8px}dt{color:var(--muted)}dd{margin:0}"
    ".badge{font-size:12px;border-radius:10px;padding:1px 8px;color:#fff;background:var(--none);vertical-align:middle}"
    ".badge.ok{background:var(--ok)}.badge.bad{background:var(--bad)}"
    ".stopped{border-left:4px solid var(--bad);padding:4px 10px;margin:0 0 8px}"
    ".stopped pre{white-space:pre-wrap;margin:4px 0}.command{user-select:all;padding:2px 6px;"
    "border:1px solid var(--border);border-radius:4px;background:var(--bg)}"
    ".attention{margin:6px 0;padding-left:18px}.attention li.alert{color:var(--bad)}"
    ".attention li.warning{color:var(--warn)}.allwell{color:var(--ok)}.error{color:var(--bad)}"
    ".charts{display:flex;flex-wrap:wrap;gap:12px}svg.chart{background:var(--bg);border:1px solid var(--border);"
    "border-radius:6px}svg .axis{stroke:var(--muted);stroke-width:1}svg .line{stroke:var(--accent);stroke-width:2}"
    "svg .dot{fill:var(--accent)}svg .bar{fill:var(--accent);opacity:.8}svg .limit{stroke:var(--bad);"
    "stroke-dasharray:4 3}svg .ok{fill:var(--ok)}svg .bad{fill:var(--bad)}svg .info{fill:var(--accent)}svg .none{fill:var(--none)}"
    "svg text{fill:var(--muted);font-size:10px}svg text.caption{fill:var(--fg);font-size:11px}"
)

THEME_SCRIPT = (
    "(function(){var mode=null;try{mode=localStorage.getItem('chakra-ui-color-mode');"
    "var top=window.parent&&window.parent!==window?window.parent.document.documentElement:null;"
    "if(top&&top.classList.contains('dark'))mode='dark';else if(top&&top.classList.contains('light'))mode='light';"
    "}catch(e){}if(mode==='dark'||mode==='light')document.documentElement.dataset.theme=mode;})();"
)


def page(body: str, *, refresh_seconds: int = 30) -> str:
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<meta http-equiv='refresh' content='{refresh_seconds}'><title>lakesync status</title>"
        f"<script>{THEME_SCRIPT}</script><style>{STYLE}</style></head><body>{body}</body></html>"
    )
