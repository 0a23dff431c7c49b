// paragrade: the little script the pages use. Everything works without it, only less live.
"use strict";

function follow(el, onValue) {
  // Server-sent events where the browser has them, polling where it does not.
  if (window.EventSource) {
    const source = new EventSource(el.dataset.events);
    source.onmessage = (msg) => onValue(JSON.parse(msg.data), () => source.close());
    return;
  }
  const url = el.dataset.poll || el.dataset.events;
  const timer = setInterval(async () => {
    const r = await fetch(url, { credentials: "same-origin" });
    if (r.ok) onValue(await r.json(), () => clearInterval(timer));
  }, 2000);
}

function liveSubmission() {
  const box = document.getElementById("live");
  if (!box || box.dataset.final === "true") return;
  follow(box, (v, stop) => {
    const done = v.final || ["graded", "error", "cancelled"].includes(v.status);
    if (done) { stop(); window.location.reload(); return; }
    box.querySelector(".status").textContent = v.status;
    const pos = box.querySelector(".position");
    if (pos) pos.textContent = v.position ? ` · position ${v.position}` : "";
  });
}

function liveBoard() {
  const board = document.getElementById("board");
  if (!board) return;
  let first = true;
  follow(board, async () => {
    if (first) { first = false; return; }  // the page already shows this state
    const r = await fetch(window.location.href, { credentials: "same-origin" });
    const page = new DOMParser().parseFromString(await r.text(), "text/html");
    const fresh = page.getElementById("board");
    if (fresh) board.replaceChildren(...fresh.childNodes);
  });
}

function checkedUpload() {
  const form = document.getElementById("upload");
  if (!form) return;
  const input = form.querySelector("input[type=file]");
  const list = form.querySelector(".checks");
  const drop = form.querySelector(".drop");
  const allowed = form.dataset.allowed.split(",");
  const maxBytes = Number(form.dataset.maxBytes);
  const check = () => {
    list.replaceChildren();
    let ok = input.files.length > 0;
    for (const f of input.files) {
      const li = document.createElement("li");
      const problem = !allowed.includes(f.name) ? `not an allowed file name (${allowed.join(", ")})`
        : f.size === 0 ? "empty" : f.size > maxBytes ? `larger than ${maxBytes} bytes` : "";
      li.textContent = problem ? `${f.name}: ${problem}` : `${f.name}: ${f.size} bytes, ready`;
      li.className = problem ? "bad" : "ok";
      ok = ok && !problem;
      list.append(li);
    }
    form.querySelectorAll("button").forEach((b) => { b.disabled = !ok; });  // Submit and Try
  };
  input.addEventListener("change", check);
  ["dragenter", "dragover"].forEach((e) => drop.addEventListener(e, (ev) => {
    ev.preventDefault(); drop.classList.add("over"); }));
  ["dragleave", "drop"].forEach((e) => drop.addEventListener(e, () => drop.classList.remove("over")));
  drop.addEventListener("drop", (ev) => { ev.preventDefault(); input.files = ev.dataTransfer.files; check(); });
}

// Grading page: a line number starts a comment on that line (without JavaScript the line is
// typed into the form as before).
function lineComments() {
  const form = document.getElementById("line-comment");
  if (!form) return;
  document.querySelectorAll("button.line-number").forEach((b) => b.addEventListener("click", () => {
    form.querySelector("select[name=file]").value = b.dataset.file;
    form.querySelector("input[name=line]").value = b.dataset.line;
    form.scrollIntoView({ block: "nearest" });
    form.querySelector("textarea[name=body]").focus();
  }));
}

document.addEventListener("DOMContentLoaded", () => {
  liveSubmission(); liveBoard(); checkedUpload(); lineComments();
});
