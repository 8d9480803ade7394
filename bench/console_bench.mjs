// The console with many jobs (bench/console.sh): the time from navigating to
// the cluster page to its jobs table drawn (first paint with data), and from
// "Next page" to the next page drawn, in headless chromium.
// usage: node console_bench.mjs BASE_URL TOKEN PAGES   (prints key=value lines)
import puppeteer from 'puppeteer-core';

const [base, token, pagesText] = process.argv.slice(2);
const pages = Number(pagesText || 10);
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
const page = await browser.newPage();
page.setDefaultTimeout(30000);
// Signed in as the form would: the token in the tab's sessionStorage.
await page.goto(base + '/');
await page.evaluate((t) => sessionStorage.setItem('muster-token', t), token);

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const firstRow = () => page.$eval('#jobs tbody tr td', (td) => td.textContent);

// First paint: a fresh load of the page (the token already in the tab).
const loads = [];
for (let i = 0; i < 5; i++) {
  const t0 = Date.now();
  await page.goto(base + '/', {waitUntil: 'domcontentloaded'});
  await page.waitForFunction(() => document.querySelectorAll('#jobs tbody tr').length > 0);
  loads.push(Date.now() - t0);
}
// Each next page, as a person clicks through.
const turns = [];
for (let i = 0; i < pages; i++) {
  const before = await firstRow();
  const t0 = Date.now();
  await page.click('#next');
  await page.waitForFunction((b) => {
    const td = document.querySelector('#jobs tbody tr td');
    return td && td.textContent !== b;
  }, {}, before);
  turns.push(Date.now() - t0);
}
const rows = await page.$$eval('#jobs tbody tr', (t) => t.length);
const total = await page.$eval('#total', (e) => e.textContent);
console.log(`first_paint_ms_median=${median(loads)}`);
console.log(`first_paint_ms_max=${Math.max(...loads)}`);
console.log(`next_page_ms_median=${median(turns)}`);
console.log(`next_page_ms_max=${Math.max(...turns)}`);
console.log(`rows_per_page=${rows}`);
console.log(`jobs_total=${total}`);
await browser.close();
