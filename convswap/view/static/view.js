"use strict";
// The run and trial pages of `convswap view`.  Every string that comes from a log is put in the page as a
// text node (never as markup), so a model output holding HTML or a script is shown, not run.

const PAGE_SIZE = 100;
// Every record's outcome is one of these: a pixel answer's one of ProVisE's five, in its precedence; a text answer's
// correct, incorrect, or unscored where no answer was read from it (its parse status says why).
const OUTCOMES = ["generation_failure", "protocol_noncompliance", "parser_failure", "unscored", "incorrect", "correct"];
const params = new URLSearchParams(location.search);

function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value !== null && value !== undefined && value !== false) node.setAttribute(name, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// A data file is a script calling convswapLoaded: pages opened from file:// may load scripts, not fetch files.
function loadData(src) {
  return new Promise((resolve, reject) => {
    window.convswapLoaded = resolve;
    const script = el("script", { src });
    script.onerror = () => reject(new Error(`cannot load ${src}`));
    document.head.append(script);
  });
}

function showError(error) {
  document.getElementById("title").textContent = String(error.message || error);
}

function mass(value) {
  return value === null || value === undefined ? "–" : value.toFixed(3);
}

// A text whose lines may break only between its words (each word is kept whole by the stylesheet).
function words(text) {
  return String(text).split(" ").flatMap((word, index) => [index ? " " : null, el("span", { class: "word" }, word)]);
}

function keyBadges(keys) {
  return keys.map((name) => el("span", { class: "key" }, name));
}

function trialLink(run, row) {
  const query = new URLSearchParams({ run, part: row.part, trial: row.trial });
  return `trial.html?${query}#${encodeURIComponent(`${row.condition}/${row.convention}`)}`;
}

// --- run page ------------------------------------------------------------------------------------

const FILTERS = {
  condition: (row, value) => row.condition === value,
  convention: (row, value) => row.convention === value,
  task: (row, value) => row.task === value,
  outcome: (row, value) => row.outcome === value,
  disagree: (row) => row.disagree,
  mass: (row, value) => row.mass !== null && row.mass < Number(value),
  audit: (row) => row.audit.length > 0,
};

function distinct(rows, field) {
  return [...new Set(rows.map((row) => row[field]))];
}

function filterState(form) {
  const state = {};
  for (const name of Object.keys(FILTERS)) {
    const input = form.elements[name];
    const value = input.type === "checkbox" ? (input.checked ? "1" : "") : input.value;
    if (value !== "") state[name] = value;
  }
  return state;
}

function runPage() {
  const run = params.get("run");
  loadData(`data/run-${run}.js`).then((data) => {
    document.title = `convswap view: ${data.title}`;
    document.getElementById("title").textContent = data.title;
    const form = document.getElementById("filters");
    const choices = {
      condition: data.conditions,
      convention: distinct(data.rows, "convention"),
      task: distinct(data.rows, "task"),
      outcome: OUTCOMES.filter((name) => data.rows.some((row) => row.outcome === name)),
    };
    for (const [name, values] of Object.entries(choices)) {
      const select = form.elements[name];
      select.append(el("option", { value: "" }, "all"), ...values.map((value) => el("option", { value }, value)));
    }
    for (const name of Object.keys(FILTERS)) {
      const input = form.elements[name];
      if (!params.has(name)) continue;
      if (input.type === "checkbox") input.checked = params.get(name) === "1";
      else input.value = params.get(name);
    }
    let page = Number(params.get("page") || 0);
    const render = () => {
      const state = filterState(form);
      const rows = data.rows.filter((row) => Object.entries(state).every(([name, value]) => FILTERS[name](row, value)));
      const pages = Math.max(1, Math.ceil(rows.length / PAGE_SIZE));
      page = Math.min(page, pages - 1);
      const query = new URLSearchParams({ run, ...state, ...(page ? { page } : {}) });
      history.replaceState(null, "", `?${query}`);
      document.getElementById("count").textContent = rows.length;
      document.getElementById("total").textContent = data.rows.length;
      const body = document.querySelector("#records tbody");
      body.replaceChildren(...rows.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE).map((row) => recordRow(run, row, data.low_mass)));
      const pager = document.getElementById("pager");
      pager.replaceChildren(`page ${page + 1} of ${pages} `);
      if (page > 0) pager.append(el("button", { type: "button", id: "previous" }, "previous"));
      if (page < pages - 1) pager.append(el("button", { type: "button", id: "next" }, "next"));
      pager.querySelectorAll("button").forEach((button) => button.addEventListener("click", () => {
        page += button.id === "next" ? 1 : -1;
        render();
      }));
    };
    form.addEventListener("input", () => { page = 0; render(); });
    render();
  }).catch(showError);
}

function recordRow(run, row, lowMass) {
  return el("tr", { class: "record" },
    el("td", {}, el("a", { href: trialLink(run, row), class: "trial-link" }, row.trial)),
    el("td", {}, row.condition),
    el("td", { class: "convention" }, row.convention),
    el("td", {}, row.task),
    el("td", {}, row.answer === null ? "–" : row.answer),
    el("td", {}, keyBadges(row.followed)),
    el("td", { class: `outcome-${row.outcome}` }, row.outcome),
    el("td", {}, row.status),
    el("td", {}, row.readout, row.disagree ? " (readouts disagree)" : ""),
    el("td", { class: row.mass !== null && row.mass < lowMass ? "low-mass" : null }, mass(row.mass)),
    el("td", { class: "failure" }, row.audit.join(", ")));
}

// --- trial page ----------------------------------------------------------------------------------

function trialPage() {
  const run = params.get("run");
  const trialId = params.get("trial");
  document.getElementById("back").href = `run.html?run=${encodeURIComponent(run)}`;
  loadData(`data/run-${run}-${params.get("part")}.js`).then((data) => {
    const shown = data.trials[trialId];
    if (!shown) throw new Error(`trial ${trialId} is not in run ${run}`);
    document.title = `convswap view: ${trialId}`;
    document.getElementById("title").textContent = `${trialId} · ${data.title}`;
    const root = document.getElementById("trial");
    root.append(trialHead(shown));
    const conditions = [...new Set(shown.records.map((record) => record.condition))];
    const source = shown.images.find((image) => image.file);
    for (const condition of conditions) {
      const cards = shown.records.filter((record) => record.condition === condition).map((r) => recordCard(r, data.low_mass, source));
      root.append(el("h2", {}, `${condition}: every convention`), el("div", { class: "conventions" }, cards));
    }
    const wanted = document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (wanted) {
      wanted.classList.add("selected");
      wanted.scrollIntoView();
    }
  }).catch(showError);
}

function trialHead(shown) {
  const trial = shown.trial;
  const facts = el("table", { class: "facts" },
    [["task", trial.task], ["target", trial.target], ["subject", trial.subject], ["cell", trial.cell],
      ["referents", trial.referents.join(", ")], ["held out", trial.held_out ? "yes" : "no"],
      ["image", JSON.stringify(trial.image)]]
      .filter(([, value]) => value !== null && value !== "")
      .map(([name, value]) => el("tr", {}, el("th", {}, name), el("td", {}, value))));
  const images = shown.images.map((image) => el("div", { class: "image-check" },
    image.file ? el("img", { src: image.file, alt: `image of ${trial.id}`, class: "stimulus" }) : null,
    el("p", { class: image.verdict === "match" ? "image-ok" : "warning", "data-verdict": image.verdict },
      image.note),
    image.outlined ? el("p", {}, `outlined: ${image.outlined}`) : null,
    el("p", { class: "hash" }, `logged sha256 ${image.logged_sha256.slice(0, 16)}…`,
      image.rendered_sha256 ? `, re-rendered ${image.rendered_sha256.slice(0, 16)}…` : "")));
  return el("div", { class: "trial-head" }, images, facts);
}

function recordCard(record, lowMass, source) {
  const card = el("div", { class: "card", id: `${record.condition}/${record.convention}` });
  const permalink = el("a", { href: `#${encodeURIComponent(`${record.condition}/${record.convention}`)}`, class: "permalink" }, "permalink");
  card.append(
    el("h3", {}, record.convention, " "),
    el("p", {}, el("span", { class: `outcome-${record.outcome}` }, record.outcome),
      ` · answer ${record.answer ?? "none"} by ${record.readout}`, record.followed.length ? " · follows " : "",
      keyBadges(record.followed), " · ", permalink),
  );
  if (record.failures.length) {
    card.append(el("ul", { class: "failures" },
      record.failures.map((failure) => el("li", { class: "failure" }, `audit ${failure.check}: ${failure.reason}`))));
  }
  card.append(el("h4", {}, "prompt"), el("pre", { class: "prompt" }, record.prompt));
  if (record.acknowledgement) card.append(el("h4", {}, "acknowledgement"), el("pre", {}, record.acknowledgement));
  card.append(el("h4", {}, "options"), optionsTable(record));
  if (record.pixels) {
    card.append(el("h4", {}, "drawn answer"), drawingBlock(record, source));
    return card;
  }
  card.append(el("h4", {}, "generated"), generationBlock(record));
  card.append(el("h4", {}, "first token"), firstTokenBlock(record, lowMass));
  return card;
}

// A pixel answer: the drawn image (its parse outlined) beside the source, the colour mask on demand, the outcome.
function drawingBlock(record, source) {
  const pixels = record.pixels;
  const drawing = record.drawing || { drawn: null, mask: null, note: "no drawing" };
  const parse = pixels.parse;
  const facts = el("p", { class: "pixel-facts" },
    el("span", { class: `pixel-outcome outcome-${pixels.outcome}` }, pixels.outcome),
    ` · protocol ${pixels.protocol}`,
    pixels.image_size ? ` · image ${pixels.image_size[0]}x${pixels.image_size[1]}` : "",
    parse ? ` · parse ${parse.status}` : "", parse && parse.output !== null ? ` · output ${JSON.stringify(parse.output)}` : "",
    record.parsed === null ? "" : ` · slot ${record.parsed}`,
    parse && parse.reason ? ` · ${parse.reason}` : "", pixels.failure ? ` · ${pixels.failure}` : "");
  const images = el("div", { class: "drawing" },
    source ? el("figure", {}, el("img", { src: source.file, alt: "source image", class: "source" }), el("figcaption", {}, "source")) : null,
    drawing.drawn ? el("figure", {}, el("img", { src: drawing.drawn, alt: "drawn answer", class: "drawn" }),
      el("figcaption", {}, "drawn, parse outlined (click for full size)")) : null);
  if (drawing.drawn) {
    images.querySelectorAll("img").forEach((image) => image.addEventListener("click", () => showFullSize(record)));
  }
  const block = el("div", {}, facts, images, el("p", { class: drawing.drawn ? "note" : "warning" }, drawing.note));
  if (drawing.mask) {
    const mask = el("img", { src: drawing.mask, alt: `${pixels.protocol} colour mask`, class: "mask", hidden: true });
    const button = el("button", { type: "button", class: "show-mask" }, "show colour mask");
    button.addEventListener("click", () => {
      mask.hidden = !mask.hidden;
      button.textContent = mask.hidden ? "show colour mask" : "hide colour mask";
    });
    block.append(button, mask);
  }
  if (parse) {
    block.append(el("table", { class: "components" },
      el("tr", {}, el("th", {}, "component"), el("th", {}, "area"), el("th", {}, "bbox"), el("th", {}, "centroid"), el("th", {}, "kept")),
      parse.components.map((component, index) => el("tr", { class: component.kept ? "kept" : null },
        el("td", { class: "num" }, index + 1), el("td", { class: "num" }, component.area), el("td", {}, JSON.stringify(component.bbox)),
        el("td", {}, component.centroid.map((value) => value.toFixed(1)).join(", ")),
        el("td", {}, component.kept ? "kept" : (component.reason || "rejected"))))));
  }
  return block;
}

// The drawing and the source at their own resolution, side by side, over the page: a mark of 20 pixels is shown as
// 20 pixels.  Escape, the close button or a click outside the images closes it.
function showFullSize(record) {
  const drawing = record.drawing;
  const figure = (src, alt, className, caption) => el("figure", {},
    el("img", { src, alt, class: className }), el("figcaption", {}, caption));
  const close = el("button", { type: "button", class: "close-full-size" }, "close");
  const dialog = el("dialog", { class: "full-size" },
    el("p", {}, `${record.convention} · ${record.pixels.outcome} · full size `, close),
    el("div", { class: "full-size-images" },
      figure(drawing.drawn, "drawn answer at full size", "full-drawn", "drawn, parse outlined"),
      drawing.source ? figure(drawing.source, "source image at full size", "full-source", "source") : null));
  close.addEventListener("click", () => dialog.close());
  dialog.addEventListener("click", (event) => { if (event.target === dialog) dialog.close(); });
  dialog.addEventListener("close", () => dialog.remove());
  document.body.append(dialog);
  dialog.showModal();
}

function optionsTable(record) {
  const logits = record.first_token ? record.first_token.candidate_logits : [];
  return el("table", { class: "options" },
    el("tr", {}, el("th", {}, "slot"), el("th", {}, "answer"), el("th", {}, "referent"), el("th", {}, "gloss"),
      el("th", {}, "keys"), el("th", {}, "logit")),
    record.options.map((option) => el("tr", { class: option.slot === record.answer ? "answer" : null },
      el("td", { class: "num" }, option.slot), el("td", {}, words(option.answer)), el("td", {}, words(option.referent)),
      el("td", {}, option.gloss ? words(option.gloss) : ""), el("td", {}, keyBadges(option.keys)),
      el("td", { class: "num" }, logits.length ? logits[option.slot - 1].toFixed(3) : "–"))));
}

function generationBlock(record) {
  const generation = record.generation;
  if (!generation) return el("p", {}, "no generation (scored on the first token)");
  const tokens = [["prompt", generation.prompt_tokens], ["completion", generation.completion_tokens],
    ["reasoning", generation.reasoning_tokens]].filter(([, count]) => count !== null && count !== undefined);
  return el("div", {},
    el("pre", { class: "output generated" }, generation.text === null ? "(no text)" : generation.text),
    el("p", {}, `finish ${generation.finish_reason} · tokens `, tokens.map(([name, count]) => `${name} ${count}`).join(", ") || "–",
      ` · parse ${record.status}`, record.parsed === null ? "" : ` · slot ${record.parsed}`,
      record.parsed_followed.length ? " · follows " : "", keyBadges(record.parsed_followed)),
    generation.error ? el("p", { class: "warning" }, `error: ${generation.error}`) : null);
}

function firstTokenBlock(record, lowMass) {
  const readout = record.first_token;
  if (!readout) {
    return el("p", {}, record.first_token_refused ? `refused: ${record.first_token_refused}` : "no first-token readout");
  }
  const low = readout.candidate_mass < lowMass;
  return el("div", {},
    el("p", {}, `surface ${readout.surface} · slot ${readout.slot} · candidate mass `,
      el("span", { class: low ? "low-mass candidate-mass" : "candidate-mass" }, mass(readout.candidate_mass)),
      low ? ` (under ${lowMass})` : "", record.first_token_followed.length ? " · follows " : "",
      keyBadges(record.first_token_followed), record.disagree ? " · disagrees with the generation" : ""),
    el("table", { class: "top-tokens" }, el("tr", {}, el("th", {}, "top first token"), el("th", {}, "id"), el("th", {}, "p")),
      readout.top.map((token) => el("tr", {}, el("td", {}, el("code", {}, JSON.stringify(token.text))),
        el("td", { class: "num" }, token.token_id), el("td", { class: "num" }, token.prob.toFixed(4))))));
}

const PAGES = { run: runPage, trial: trialPage };
PAGES[document.body.dataset.page]();
