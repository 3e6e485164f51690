// The upload page: file picker and drag-and-drop uploads to POST /images,
// a gallery from GET /api/images. Delete tokens of this browser's uploads
// are kept in localStorage, so their images get a delete button.
"use strict";

const $ = id => document.getElementById(id);
const tokens = JSON.parse(localStorage.getItem("imagehost-tokens") || "{}");
let page = 0;

function saveToken(id, token) {
  tokens[id] = token;
  localStorage.setItem("imagehost-tokens", JSON.stringify(tokens));
}

function say(text, error) {
  const li = document.createElement("li");
  li.textContent = text;
  if (error) li.className = "error";
  $("status").prepend(li);
}

function tile(img) {
  const li = document.createElement("li");
  li.dataset.id = img.id;
  const a = document.createElement("a");
  a.href = img.url;
  const thumb = document.createElement("img");
  thumb.src = img.url;          // the browser scales it down (object-fit)
  thumb.loading = "lazy";
  thumb.alt = `${img.type} ${img.width}×${img.height}`;
  a.append(thumb);
  const meta = document.createElement("div");
  meta.className = "meta";
  meta.textContent = `${img.width}×${img.height} · ${Math.ceil(img.size / 1024)} KiB`;
  if (tokens[img.id]) {
    const del = document.createElement("button");
    del.textContent = "delete";
    del.onclick = () => remove(img.id, li);
    meta.append(del);
  }
  li.append(a, meta);
  return li;
}

async function remove(id, li) {
  const r = await fetch(`/i/${id}`, { method: "DELETE", headers: { "X-Delete-Token": tokens[id] } });
  if (r.status === 204 || r.status === 404) {
    delete tokens[id];
    localStorage.setItem("imagehost-tokens", JSON.stringify(tokens));
    li.remove();
    recount();
  } else {
    say(`delete failed: ${r.status}`, true);
  }
}

// The count beside "Gallery" after an upload or delete: asked of the
// server, since a stored duplicate does not add one.
async function recount() {
  const r = await fetch("/api/images?page=1");
  if (r.ok) $("count").textContent = `(${(await r.json()).total})`;
}

// Loads the next page of the gallery (page 1 on start: newest first).
async function more() {
  const r = await fetch(`/api/images?page=${page + 1}`);
  if (!r.ok) return say(`listing failed: ${r.status}`, true);
  const list = await r.json();
  page = list.page;
  $("count").textContent = `(${list.total})`;
  for (const img of list.images) {
    if (!document.querySelector(`#gallery li[data-id="${img.id}"]`)) $("gallery").append(tile(img));
  }
  $("more").hidden = list.page >= list.pages;
}

async function upload(file) {
  const body = new FormData();
  body.append("file", file);
  let r;
  try {
    r = await fetch("/images", { method: "POST", body });
  } catch (e) {
    return say(`${file.name}: ${e.message}`, true);
  }
  const res = await r.json().catch(() => ({ error: `HTTP ${r.status}` }));
  if (!r.ok) return say(`${file.name}: ${res.error}`, true);
  if (res.delete_token) saveToken(res.id, res.delete_token);
  say(`${file.name}: ${r.status === 201 ? "stored" : "already stored"} as ${res.id.slice(0, 12)}…`);
  const old = document.querySelector(`#gallery li[data-id="${res.id}"]`);
  if (old) old.remove();
  $("gallery").prepend(tile(res));
  recount();
}

async function uploadAll(files) {
  for (const f of files) await upload(f);
}

// A copy: clearing the input empties its live FileList.
$("file").onchange = e => { uploadAll([...e.target.files]); e.target.value = ""; };
const drop = $("drop");
drop.ondragover = e => { e.preventDefault(); drop.classList.add("over"); };
drop.ondragleave = () => drop.classList.remove("over");
drop.ondrop = e => {
  e.preventDefault();
  drop.classList.remove("over");
  uploadAll([...e.dataTransfer.files]);
};
$("more").onclick = more;
more();
