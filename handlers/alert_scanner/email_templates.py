"""The alert email's two layouts: plain text, and HTML that mail clients render alike.

The HTML is built the way mail clients accept it: layout tables, every style inline (clients that
drop a `<style>` block still show a clean, bounded card), and one `<style>` block holding only
what inline styles cannot say, the phone layout. Under 600 px (`@media`, which Apple Mail,
Gmail's apps and Outlook's mobile apps honour) each row of the table becomes a block of its own,
its cells stacked with a label each ("Before", "After", "Why"), so nothing is wider than the
screen. Long unbroken values (a part number of 60 characters) wrap anywhere rather than widen
the table. Outlook on Windows, which ignores `max-width`, gets a fixed-width table of its own in
a conditional comment. Nothing loads from the network: no images, fonts or stylesheets.

Every `$value` is substituted already escaped (emails.py): the templates add markup, never data.
"""

from __future__ import annotations

from string import Template

# Colours with at least 4.5:1 contrast on white (WCAG AA), the text's and the muted labels'.
TEXT_COLOUR = "#1f2328"
MUTED_COLOUR = "#57606a"
LINK_COLOUR = "#0969da"
RULE_COLOUR = "#d8dee4"
PAGE_COLOUR = "#f3f4f6"
FONTS = "-apple-system, BlinkMacSystemFont, 'Segoe UI', Helvetica, Arial, sans-serif"
# Below this width the table's rows become stacked blocks.
PHONE_MAX_WIDTH_PX = 600
CARD_MAX_WIDTH_PX = 680

TEXT = Template("""\
Hello,

$headline

$items$more
--
$footer""")

TEXT_ITEM = Template("""\
* $summary
    before: $before
    after:  $after
    why:    $reason
$link""")

_CELL = (
    "padding: 10px 8px; border-top: 1px solid $rule; vertical-align: top; text-align: left;"
    " overflow-wrap: anywhere; word-break: break-word;"
)
_HEAD = (
    "padding: 8px; text-align: left; font-size: 12px; font-weight: 600; color: $muted;"
    " text-transform: uppercase; letter-spacing: 0.03em;"
)
# Shown in the phone layout only, where the header row is hidden: the cell says what it is.
_LABEL = "display: none; mso-hide: all; color: $muted; font-weight: normal;"


def _styled(template: str) -> str:
    """The template with the colours and fonts in place; `$$name` stays for the data."""
    return Template(template).safe_substitute(
        text=TEXT_COLOUR,
        muted=MUTED_COLOUR,
        link=LINK_COLOUR,
        rule=RULE_COLOUR,
        page=PAGE_COLOUR,
        fonts=FONTS,
        cell=Template(_CELL).substitute(rule=RULE_COLOUR),
        head=Template(_HEAD).substitute(muted=MUTED_COLOUR),
        label=Template(_LABEL).substitute(muted=MUTED_COLOUR),
        phone=PHONE_MAX_WIDTH_PX,
        card=CARD_MAX_WIDTH_PX,
    )


HTML = Template(
    _styled("""\
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="x-apple-disable-message-reformatting">
<meta name="color-scheme" content="light">
<title>$$title</title>
<style>
@media only screen and (max-width: ${phone}px) {
  .outer { padding: 0 !important; }
  .card { border-radius: 0 !important; border-left: 0 !important; border-right: 0 !important; }
  .pad { padding-left: 16px !important; padding-right: 16px !important; }
  .items, .items tbody, .items tr, .items td { display: block !important; width: auto !important; }
  .items .head { display: none !important; }
  .items .item { padding: 10px 0 !important; border-top: 1px solid $rule !important; }
  .items td { border: 0 !important; padding: 2px 0 !important; }
  .items .part { font-size: 16px !important; }
  .items .label { display: inline !important; }
}
</style>
</head>
<body style="margin: 0; padding: 0; background-color: $page;">
<div style="display: none; max-height: 0; overflow: hidden; mso-hide: all;">$$headline</div>
<table role="presentation" width="100%" cellpadding="0" cellspacing="0" border="0" \
style="background-color: $page;">
<tr><td class="outer" align="center" style="padding: 24px 8px;">
<!--[if mso]><table role="presentation" width="${card}" align="center" cellpadding="0" \
cellspacing="0" border="0"><tr><td><![endif]-->
<table role="presentation" class="card" width="100%" cellpadding="0" cellspacing="0" border="0" \
style="max-width: ${card}px; background-color: #ffffff; border: 1px solid $rule; \
border-radius: 8px; font-family: $fonts; font-size: 15px; line-height: 1.5; color: $text;">
<tr><td class="pad" style="padding: 14px 24px; border-bottom: 1px solid $rule; font-size: 13px; \
font-weight: 600; letter-spacing: 0.04em; text-transform: uppercase; color: $muted;">\
Part alerts</td></tr>
<tr><td class="pad" style="padding: 20px 24px 4px;">
<p style="margin: 0 0 12px;">Hello,</p>
<p style="margin: 0 0 12px;">$$headline</p>
</td></tr>
<tr><td class="pad" style="padding: 0 24px 16px;">
<table class="items" width="100%" cellpadding="0" cellspacing="0" border="0" \
style="width: 100%; border-collapse: collapse; font-size: 14px;">
<tr class="head"><th style="$head width: 22%;">Part</th>\
<th style="$head width: 20%;">Change</th><th style="$head width: 16%;">Before</th>\
<th style="$head width: 16%;">After</th><th style="$head">Why</th></tr>
$$rows
</table>
$$more</td></tr>
<tr><td class="pad" style="padding: 16px 24px 20px; border-top: 1px solid $rule; \
font-size: 13px; color: $muted;">
$$footer</td></tr>
</table>
<!--[if mso]></td></tr></table><![endif]-->
</td></tr>
</table>
</body>
</html>
""")
)

HTML_ROW = Template(
    _styled(
        '<tr class="item">'
        '<td class="part" style="$cell font-weight: 600;">$$part</td>'
        '<td style="$cell">$$change</td>'
        '<td style="$cell color: $muted;"><span class="label" style="$label">Before: </span>'
        "$$before</td>"
        '<td style="$cell font-weight: 600;"><span class="label" style="$label">After: </span>'
        "$$after</td>"
        '<td style="$cell color: $muted;"><span class="label" style="$label">Why: </span>'
        "$$reason</td>"
        "</tr>"
    )
)

HTML_MORE = Template('<p style="margin: 12px 0 0; font-size: 14px;">$link</p>\n')
HTML_FOOTER_LINE = Template('<p style="margin: 0 0 6px;">$line</p>\n')
HTML_LINK = Template(
    _styled('<a href="$$href" style="color: $link; text-decoration: underline;">$$text</a>')
)
