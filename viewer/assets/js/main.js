// main.js — entry point.

boot();
