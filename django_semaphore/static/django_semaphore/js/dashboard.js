/* Keeps the semaphore dashboard live: polls the page's JSON endpoint and
   writes the numbers into the elements marked with data-* attributes, and
   sends every action form (data-confirm: release, set or clear a limit,
   pause, resume) only after the browser's confirm(), without leaving the
   page. A static file on purpose: no inline script, so a strict
   Content-Security-Policy holds. */
(function () {
    "use strict";

    const root = document.getElementById("semaphore-live");
    if (!root || !root.dataset.pollUrl) {
        return;
    }
    const every = Math.max(1, Number(root.dataset.pollSeconds) || 3) * 1000;
    const liveStatus = root.querySelector("[data-live-status]");
    const flash = root.querySelector("[data-flash]");

    function pick(data, path) {
        return path.split(".").reduce((value, key) => (value == null ? value : value[key]), data);
    }

    function text(value) {
        return value == null ? "" : String(value);
    }

    function fillCells(element, item) {
        element.querySelectorAll("[data-cell]").forEach((cell) => {
            cell.textContent = text(pick(item, cell.dataset.cell));
        });
        element.querySelectorAll("[data-cell-value]").forEach((input) => {
            input.value = text(pick(item, input.dataset.cellValue));
        });
        element.querySelectorAll("[data-cell-show-when]").forEach((cell) => {
            cell.hidden = !pick(item, cell.dataset.cellShowWhen);
        });
        element.querySelectorAll("[data-cell-href]").forEach((link) => {
            link.setAttribute("href", text(pick(item, link.dataset.cellHref)));
        });
        const token = element.matches("[data-token]") ? element : element.querySelector("[data-token]");
        if (token) {
            token.dataset.token = text(item.token || item.token_prefix);  // the prefix only, for view-only staff
        }
        setBar(element, item);
    }

    function setBar(scope, item) {
        const bar = scope.querySelector("[data-bar]");
        if (bar) {
            const full = item.level === "paused" ? 100 : Math.min(Math.round(item.utilisation * 100), 100);
            bar.setAttribute("width", text(full));  // a paused bar is all grey
            bar.setAttribute("class", "sem-bar-fill level-" + item.level);
        }
    }

    function rebuild(container, template, items) {
        if (!container || !template) {
            return;
        }
        const rows = items.map((item) => {
            const fragment = template.content.cloneNode(true);
            const element = fragment.firstElementChild;
            fillCells(element, item);
            return element;
        });
        container.replaceChildren(...rows);
    }

    function update(card, row) {
        card.querySelectorAll("[data-field]").forEach((element) => {
            element.textContent = text(pick(row, element.dataset.field));
        });
        card.querySelectorAll("[data-show-if]").forEach((element) => {
            element.hidden = pick(row, element.dataset.showIf) == null;
        });
        // Flags such as "paused": shown (or, hide-when, hidden) while true.
        card.querySelectorAll("[data-show-when]").forEach((element) => {
            element.hidden = !pick(row, element.dataset.showWhen);
        });
        card.querySelectorAll("[data-hide-when]").forEach((element) => {
            element.hidden = Boolean(pick(row, element.dataset.hideWhen));
        });
        card.querySelectorAll("[data-show-if-empty]").forEach((element) => {
            element.hidden = (pick(row, element.dataset.showIfEmpty) || []).length > 0;
        });
        const usage = card.querySelector(".sem-usage");
        if (usage) {
            setBar(usage, row);
        }
        if (row.chart) {
            card.querySelector("[data-chart-used]")?.setAttribute("points", row.chart.used);
            card.querySelector("[data-chart-waiting]")?.setAttribute("points", row.chart.waiting);
            card.querySelector("[data-chart-limit]")?.setAttribute("points", row.chart.limit);
        }
        if (row.activity) {
            card.querySelectorAll("[data-outcome-line]").forEach((line) => {
                line.setAttribute("points", text(row.activity.chart[line.dataset.outcomeLine]));
            });
        }
        if (row.keyed) {
            rebuild(card.querySelector("[data-busiest]"), card.querySelector("[data-busiest-template]"), row.busiest);
        }
        if (row.holder_list) {
            rebuild(card.querySelector("[data-holders]"), card.querySelector("[data-holder-template]"), row.holder_list);
        }
        if (row.stripes) {
            rebuild(card.querySelector("[data-stripes]"), card.querySelector("[data-stripe-template]"), row.stripes);
        }
    }

    async function refresh() {
        try {
            const response = await fetch(root.dataset.pollUrl, {
                headers: {Accept: "application/json"},
                credentials: "same-origin",
            });
            const data = await response.json();
            if (!response.ok) {
                throw new Error(data.error || response.statusText);
            }
            data.semaphores.forEach((row) => {
                const card = root.querySelector('[data-semaphore="' + CSS.escape(row.name) + '"]');
                if (card) {
                    update(card, row);
                }
            });
            liveStatus.classList.remove("sem-stale");
            // The server's time in the site's zone, as every other time on the page: never the browser's.
            liveStatus.textContent = liveStatus.dataset.textOk + " " + text(data.updated_at);
        } catch (error) {
            liveStatus.classList.add("sem-stale");
            liveStatus.textContent = liveStatus.dataset.textStale + " " + text(error.message);
        }
    }

    function say(message, ok) {
        if (!flash) {
            return;
        }
        const item = flash.firstElementChild;
        item.className = ok ? "success" : "error";
        item.textContent = message;
        flash.hidden = false;
    }

    root.addEventListener("submit", async (event) => {
        const form = event.target.closest("form[data-confirm]");
        if (!form) {
            return;
        }
        event.preventDefault();
        if (!window.confirm(form.dataset.confirm)) {
            return;
        }
        const body = new FormData(form);
        body.set("confirm", "yes");
        try {
            const response = await fetch(form.action, {
                method: "POST",
                body: body,
                headers: {Accept: "application/json"},
                credentials: "same-origin",
            });
            const result = await response.json();
            say(result.message || result.error || response.statusText, response.ok);
        } catch (error) {
            say(error.message, false);
        }
        refresh();
    });

    // The next poll is planned once the last one has finished, never on a
    // fixed clock: a slow answer (a busy Redis) must not pile requests up.
    async function poll() {
        await refresh();
        window.setTimeout(poll, every);
    }

    window.setTimeout(poll, every);
}());
