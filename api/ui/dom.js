// Building the page: every piece of data goes in as text (textContent or an attribute value),
// never as markup, so a job name, a param or an error message cannot inject anything.

const SVG_NS = "http://www.w3.org/2000/svg";

function build(element, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else if (key === "class") element.setAttribute("class", value);
    else element.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

/** An HTML element: h("td", {class: "num"}, "12 ms"). */
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** An SVG element, for the charts. */
export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

export function replace(target, ...children) {
  target.replaceChildren();
  return build(target, {}, children);
}

export function link(hash, ...children) {
  return h("a", { href: hash }, ...children);
}

export function jobHash(id) {
  return `#/jobs/${encodeURIComponent(id)}`;
}

export function badge(status) {
  return h("span", { class: `badge status-${String(status).replace(/[^a-z_]/g, "")}` }, status);
}
