// anychat's service worker. Its one job: where the server cannot be reached, a page that says so,
// instead of the browser's own error. Nothing else is cached, so the page and every answer are
// always the server's own, and a navigation does not wait for this worker to start (navigation
// preload fetches it meanwhile).
const CACHE = "anychat-offline-1";
const OFFLINE_PAGE = "app-files/offline.html";

self.addEventListener("install", (event) => {
    event.waitUntil(caches.open(CACHE).then((cache) => cache.addAll([OFFLINE_PAGE, "app-files/icon-192.png"])).then(() => self.skipWaiting()));
});

self.addEventListener("activate", (event) => {
    event.waitUntil((async () => {
        for (const name of await caches.keys()) {
            if (name !== CACHE) await caches.delete(name);
        }
        if (self.registration.navigationPreload) await self.registration.navigationPreload.enable();
        await self.clients.claim();
    })());
});

self.addEventListener("fetch", (event) => {
    if (event.request.mode !== "navigate") return;
    event.respondWith((async () => {
        try {
            return (await event.preloadResponse) || (await fetch(event.request));
        } catch {
            return (await caches.match(OFFLINE_PAGE)) || Response.error();
        }
    })());
});
