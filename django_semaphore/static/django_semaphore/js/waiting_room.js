/* The waiting room's queue page, with JavaScript: asks the server again every refresh interval (the
   same URL, as JSON, marked as the page's own poll), writes the visitor's place and estimated wait
   into the page's aria-live region and shows or hides its "paused" notice (the answer's
   Semaphore-Room-Paused header), only when they change so a screen reader is not interrupted
   for nothing, and loads the page again when the server says the visitor's turn has come (204).
   No full-page refresh meanwhile: the page's own <meta> refresh, which lets a browser in whose
   script never ran (off, blocked, or not served at all), is cancelled here. A static file, so a
   strict Content-Security-Policy holds; the texts come from the template (translated). */
(function () {
    "use strict";

    const room = document.getElementById("semaphore-room");
    if (!room || typeof window.fetch !== "function") {
        return;
    }
    const every = Math.max(100, Number(room.dataset.refreshMs) || 10000);

    function cancelTheFallback() {
        // The page's refresh is for a browser whose script did not run. Removing its element does not
        // cancel a refresh already scheduled (Chromium); stopping the page's load does, in every engine:
        // once the page has loaded, so nothing it still loads is cut off.
        const fallback = document.querySelector('meta[data-room="refresh"]');
        if (fallback) {
            fallback.remove();
        }
        if (document.readyState === "complete") {
            window.stop();
        } else {
            window.addEventListener("load", () => window.stop());
        }
    }
    cancelTheFallback();
    const field = (name) => room.querySelector('[data-room="' + name + '"]');
    const headers = { Accept: "application/json" };
    headers[room.dataset.pollHeader || "Semaphore-Room"] = room.dataset.pollValue || "poll";

    function etaText(seconds) {
        if (seconds === null || seconds === undefined) {
            return room.dataset.etaUnknown;
        }
        if (seconds < 60) {
            return room.dataset.etaSoon;
        }
        const minutes = Math.ceil(seconds / 60);
        if (minutes === 1) {
            return room.dataset.etaMinute;
        }
        if (minutes < 90) {
            return room.dataset.etaMinutes.replace("{n}", String(minutes));
        }
        return room.dataset.etaHours.replace("{n}", String(Math.ceil(minutes / 60)));
    }

    function write(name, value) {
        const element = field(name);
        if (element && element.textContent !== value) {
            element.textContent = value;
        }
    }

    function show(state, paused) {
        write("position", state.position === null ? "-" : String(state.position));
        const notice = field("paused");
        if (notice && notice.hidden !== !paused) {
            notice.hidden = !paused;
        }
        write("eta", etaText(state.eta_seconds));
        const updated = field("updated");
        if (updated && state.updated_at) {
            updated.setAttribute("datetime", state.updated_at);
            const when = new Date(state.updated_at);
            updated.textContent = isNaN(when.getTime()) ? state.updated_at : when.toLocaleTimeString();
        }
    }

    function enter() {
        // A GET of the same address: the visitor is inside now, and the view answers.
        window.location.replace(window.location.href);
    }

    function later(ms) {
        window.setTimeout(poll, ms);
    }

    let proof = null;  // "<challenge> <counter>": sent until the visitor has a place

    function prove(challenge, difficulty) {
        // A place costs a proof of work (waiting_room_proof.js solves it): ask again at once with it.
        if (typeof window.semaphoreRoomSolve !== "function") {
            later(every);
            return;
        }
        window.semaphoreRoomSolve(challenge, difficulty, (counter) => {
            proof = challenge + " " + counter;
            poll();
        });
    }

    function poll() {
        const asked = Object.assign({}, headers);
        if (proof) {
            asked["Semaphore-Room-Proof"] = proof;
        }
        fetch(window.location.href, { headers: asked, credentials: "same-origin", cache: "no-store" })
            .then((response) => {
                if (response.status === 204) {
                    enter();
                    return null;
                }
                const type = response.headers.get("Content-Type") || "";
                if (type.indexOf("application/json") === 0) {
                    return response.json().then((state) => {
                        if (state && state.challenge) {
                            proof = null;
                            prove(state.challenge, Number(state.difficulty));
                        } else if (state && (typeof state.position === "number" || state.position === null)) {
                            proof = null;  // a place: its ticket keeps it from now on
                            show(state, response.headers.get("Semaphore-Room-Paused") === "1");
                            const seconds = Number(state.refresh_seconds);
                            later(seconds > 0 ? seconds * 1000 : every);
                        } else if (response.ok) {
                            enter();  // the page itself, no longer behind a room
                        } else {
                            later(every);
                        }
                    });
                }
                if (response.ok) {
                    enter();  // no room answers any more (turned off, or the visitor is let through)
                } else {
                    later(every);  // an error page: ask again, the place is kept
                }
                return null;
            })
            .catch(() => later(every));  // a short disconnect keeps the place: ask again
    }

    if (room.dataset.challenge) {
        prove(room.dataset.challenge, Number(room.dataset.difficulty));
    } else {
        later(every);
    }
})();
