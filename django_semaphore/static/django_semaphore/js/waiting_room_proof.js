/* The waiting room's proof of work, solved in the browser: find a counter such that
   SHA-256("<challenge>:<counter>") starts with `difficulty` zero bits (web/room_proof.py checks it
   with one hash). SHA-256 is written out here (FIPS 180-4) rather than taken from crypto.subtle,
   which is asynchronous per hash (slow for a search) and absent outside secure contexts. The
   challenge's whole 64-byte blocks are hashed once (a midstate); each try hashes the last one or two.
   window.semaphoreRoomSolve(challenge, difficulty, done) works in slices of 20 ms, so the page stays
   responsive, and calls done(counter). */
(function () {
    "use strict";

    function fractions(count, root) {
        // The first 32 bits of the fractional parts of the roots of the first primes (the standard's constants).
        const found = [];
        for (let n = 2; found.length < count; n += 1) {
            let prime = true;
            for (let d = 2; d * d <= n; d += 1) {
                if (n % d === 0) {
                    prime = false;
                    break;
                }
            }
            if (prime) {
                const value = root(n);
                found.push(Math.floor((value - Math.floor(value)) * 4294967296) >>> 0);
            }
        }
        return new Uint32Array(found);
    }

    const K = fractions(64, Math.cbrt);
    const H = fractions(8, Math.sqrt);
    const w = new Int32Array(64);

    // One block of `bytes` at `offset` into the running state `from`, written to `to` (either may be the other).
    function compress(from, to, bytes, offset) {
        for (let i = 0; i < 16; i += 1) {
            const at = offset + i * 4;
            w[i] = (bytes[at] << 24) | (bytes[at + 1] << 16) | (bytes[at + 2] << 8) | bytes[at + 3];
        }
        for (let i = 16; i < 64; i += 1) {
            const x = w[i - 15];
            const y = w[i - 2];
            const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
            const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
            w[i] = (w[i - 16] + s0 + w[i - 7] + s1) | 0;
        }
        let a = from[0] | 0;
        let b = from[1] | 0;
        let c = from[2] | 0;
        let d = from[3] | 0;
        let e = from[4] | 0;
        let f = from[5] | 0;
        let g = from[6] | 0;
        let h = from[7] | 0;
        for (let i = 0; i < 64; i += 1) {
            const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
            const t1 = (h + S1 + ((e & f) ^ (~e & g)) + K[i] + w[i]) | 0;
            const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
            const t2 = (S0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
            h = g;
            g = f;
            f = e;
            e = (d + t1) | 0;
            d = c;
            c = b;
            b = a;
            a = (t1 + t2) | 0;
        }
        to[0] = from[0] + a;
        to[1] = from[1] + b;
        to[2] = from[2] + c;
        to[3] = from[3] + d;
        to[4] = from[4] + e;
        to[5] = from[5] + f;
        to[6] = from[6] + g;
        to[7] = from[7] + h;
    }

    function ascii(text) {
        const bytes = new Uint8Array(text.length);
        for (let i = 0; i < text.length; i += 1) {
            bytes[i] = text.charCodeAt(i) & 0xff;
        }
        return bytes;
    }

    function solver(challenge) {
        const prefix = ascii(challenge + ":");
        const whole = Math.floor(prefix.length / 64) * 64;
        const mid = new Uint32Array(H);
        for (let at = 0; at < whole; at += 64) {
            compress(mid, mid, prefix, at);
        }
        const rest = prefix.slice(whole);
        const tail = new Uint8Array(128);
        const state = new Uint32Array(8);
        // The first word of SHA-256(challenge + ":" + counter).
        return function (counter) {
            const digits = String(counter);
            const length = rest.length + digits.length;
            const blocks = length + 9 > 64 ? 2 : 1;
            tail.fill(0);
            tail.set(rest, 0);
            for (let i = 0; i < digits.length; i += 1) {
                tail[rest.length + i] = digits.charCodeAt(i);
            }
            tail[length] = 0x80;
            const bits = (prefix.length + digits.length) * 8;
            const end = blocks * 64;
            tail[end - 4] = (bits >>> 24) & 0xff;
            tail[end - 3] = (bits >>> 16) & 0xff;
            tail[end - 2] = (bits >>> 8) & 0xff;
            tail[end - 1] = bits & 0xff;
            compress(mid, state, tail, 0);
            if (blocks === 2) {
                compress(state, state, tail, 64);
            }
            return state;
        };
    }

    function solve(challenge, difficulty, done) {
        const first = solver(challenge);
        const shift = 32 - Math.min(difficulty, 32);
        let counter = 0;
        function slice() {
            const until = Date.now() + 20;
            while (Date.now() < until) {
                for (let i = 0; i < 256; i += 1) {
                    const word = first(counter)[0];
                    if ((difficulty >= 32 ? word : word >>> shift) === 0) {
                        done(counter);
                        return;
                    }
                    counter += 1;
                }
            }
            window.setTimeout(slice, 0);
        }
        slice();
    }

    window.semaphoreRoomSolve = solve;
    window.semaphoreRoomDigest = function (text) {
        // For checking the digest against another implementation (the test suite): the whole hash, in hex.
        const index = text.lastIndexOf(":");
        const state = solver(text.slice(0, index))(text.slice(index + 1));
        return Array.from(state, (word) => word.toString(16).padStart(8, "0")).join("");
    };
})();
