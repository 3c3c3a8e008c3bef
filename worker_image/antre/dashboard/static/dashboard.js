// antre dashboard: the only script. Live updates replace the fragments the server sends
// (element id -> HTML rendered from the page's own templates), and a "select all" box ticks the
// rows of its table. Everything else is plain HTML forms, so the pages work without it.
"use strict";
(() => {
  const main = document.querySelector("main[data-live]");
  const status = document.getElementById("live-status");
  const show = (text, state) => {
    if (status) { status.textContent = text; status.dataset.state = state; }
  };
  if (main && window.EventSource) {
    const source = new EventSource(main.dataset.live);
    const csrf = document.querySelector("meta[name=antre-csrf]");
    source.addEventListener("update", (event) => {
      const fragments = JSON.parse(event.data);
      for (const [id, html] of Object.entries(fragments)) {
        const target = document.getElementById(id);
        // A fragment the reader is in (a focused link or button) waits for a later frame:
        // replacing it would throw the keyboard focus back to the top of the page.
        if (!target || target.contains(document.activeElement)) continue;
        target.innerHTML = html;
        // One frame serves every tab, so its forms come without this session's CSRF token.
        for (const input of target.querySelectorAll("input[name=csrf]")) {
          if (!input.value && csrf) input.value = csrf.content;
        }
      }
      show("live · " + new Date().toLocaleTimeString(), "live");
    });
    source.addEventListener("open", () => show("live", "live"));
    source.addEventListener("error", () => {
      if (source.readyState === EventSource.CLOSED) {
        show("live updates stopped: reload the page", "lost");
      } else {
        show("reconnecting…", "lost");
      }
    });
  }
  document.addEventListener("change", (event) => {
    const box = event.target;
    if (!(box instanceof HTMLInputElement) || !box.hasAttribute("data-select-all")) return;
    const table = box.closest("table");
    for (const row of table ? table.querySelectorAll("tbody input[name=ids]") : []) {
      row.checked = box.checked;
    }
  });
})();
