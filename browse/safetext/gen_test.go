package safetext

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Test-time generator of realistic article pages: a head with meta tags, a
// stylesheet and scripts, a navigation bar of links, an article with
// headings, paragraphs with inline links/emphasis/code, lists, a table, a
// pre block, figures, an aside and a footer. Deterministic for a seed.

var genWords = strings.Fields(`the of and to in is was for on that with as by at from his her
they this have are which be or had not were but one all their there been has when who will more
no if out so said what up its about into than them can only other new some could time these two
may then do first any my now such like our over man me even most made after also did many before
must through back years where much your way well down should because each just those people how
too little state good very make world still own see men work long get here between both life being
under never day same another know while last might us great old year off come since against go
came right used take three system network server request response cache layer kernel process memory
thread socket buffer parser token stream packet router gateway cluster storage volume index query`)

func genSentence(r *rand.Rand, words int) string {
	var b strings.Builder
	for i := range words {
		w := genWords[r.IntN(len(genWords))]
		if i == 0 {
			w = strings.ToUpper(w[:1]) + w[1:]
		} else {
			b.WriteByte(' ')
		}
		b.WriteString(w)
	}
	b.WriteByte('.')
	return b.String()
}

func genInline(r *rand.Rand) string {
	var b strings.Builder
	n := 3 + r.IntN(5)
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		s := genSentence(r, 6+r.IntN(14))
		switch r.IntN(8) {
		case 0:
			fmt.Fprintf(&b, `<a href="/wiki/%s_%d?ref=nav#s" class="link internal" title="%s">%s</a>`, genWords[r.IntN(len(genWords))], r.IntN(1000), genWords[r.IntN(len(genWords))], s)
		case 1:
			fmt.Fprintf(&b, `<em>%s</em>`, s)
		case 2:
			fmt.Fprintf(&b, `<strong class="x">%s</strong>`, s)
		case 3:
			fmt.Fprintf(&b, `%s <code>cfg.%s = %d</code>`, s, genWords[r.IntN(len(genWords))], r.IntN(99))
		case 4:
			fmt.Fprintf(&b, `%s &amp; %s&nbsp;&mdash; <span class="note">%s</span>`, s, genWords[r.IntN(len(genWords))], genSentence(r, 4))
		default:
			b.WriteString(s)
		}
	}
	return b.String()
}

// genPage returns one realistic article page of roughly size bytes.
func genPage(r *rand.Rand, size int) string {
	var b strings.Builder
	b.Grow(size + 4096)
	b.WriteString(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>` + genSentence(r, 6) + ` - Example Wiki</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="description" content="` + genSentence(r, 20) + `">
<meta property="og:title" content="Example"><link rel="stylesheet" href="/static/site.css?v=3">
<link rel="icon" href="/favicon.ico">
<style>
body{font-family:system-ui,sans-serif;margin:0;color:#222}
.nav{display:flex;gap:1rem}.nav a{color:#06c;text-decoration:none}
.sr-only{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0,0,0,0)}
.article h2{border-bottom:1px solid #ddd}.hidden{display:none}
@media (max-width:600px){.sidebar{display:none}}
table{border-collapse:collapse}td,th{padding:4px 8px;border:1px solid #ccc}
</style>
<script async src="https://www.googletagmanager.com/gtag/js?id=G-XXXX"></script>
<script>window.dataLayer=window.dataLayer||[];function gtag(){dataLayer.push(arguments)}gtag("js",new Date());
gtag("config","G-XXXX",{anonymize_ip:true});(function(){var s=document.createElement("script");s.src="/a.js";
document.head.appendChild(s);for(var i=0;i<10;i++){if(i<5){console.log("<p>"+i+"</p>")}}})();</script>
</head>
<body class="page article-page">
<a class="sr-only" href="#content">Skip to content</a>
<header class="site-header"><div class="logo"><a href="/"><img src="/logo.png" alt="Example Wiki logo" width="120" height="40"></a></div>
<nav class="nav" aria-label="Main"><ul>`)
	for range 12 {
		w := genWords[r.IntN(len(genWords))]
		fmt.Fprintf(&b, `<li class="nav-item"><a href="/topics/%s" class="nav-link">%s</a></li>`, w, w)
	}
	b.WriteString(`</ul></nav>
<form class="search" action="/search"><input type="search" name="q" placeholder="Search"><button type="submit">Go</button></form>
</header>
<div class="layout"><main id="content" class="article"><article>
<h1 class="title">` + genSentence(r, 7) + `</h1>
<div class="byline">By <a href="/u/alice" rel="author">Alice Example</a> &middot; <time datetime="2024-05-01">1 May 2024</time></div>
`)
	sec := 0
	for b.Len() < size {
		sec++
		fmt.Fprintf(&b, "<section id=\"s%d\">\n<h2><span class=\"mw-headline\">%s</span></h2>\n", sec, genSentence(r, 4))
		for range 2 + r.IntN(4) {
			b.WriteString("<p>" + genInline(r) + "</p>\n")
		}
		switch sec % 5 {
		case 0:
			b.WriteString("<ul>\n")
			for range 3 + r.IntN(6) {
				b.WriteString("  <li>" + genSentence(r, 5+r.IntN(10)) + "</li>\n")
			}
			b.WriteString("</ul>\n")
		case 1:
			b.WriteString("<table class=\"wikitable\">\n<thead><tr><th>Name</th><th>Value</th><th>Notes</th></tr></thead>\n<tbody>\n")
			for i := range 4 + r.IntN(8) {
				fmt.Fprintf(&b, "<tr><td>%s</td><td style=\"text-align:right\">%d</td><td>%s</td></tr>\n", genWords[r.IntN(len(genWords))], i*37+r.IntN(30), genSentence(r, 6))
			}
			b.WriteString("</tbody></table>\n")
		case 2:
			b.WriteString("<pre><code class=\"language-go\">func main() {\n\tfor i := 0; i &lt; 10; i++ {\n\t\tfmt.Println(\"" + genSentence(r, 3) + "\", i)\n\t}\n}\n</code></pre>\n")
		case 3:
			fmt.Fprintf(&b, "<figure><img src=\"/img/%d.jpg\" alt=\"%s\" loading=\"lazy\"><figcaption>%s</figcaption></figure>\n", r.IntN(1e6), genSentence(r, 5), genSentence(r, 8))
		case 4:
			b.WriteString("<ol>\n")
			for range 3 + r.IntN(4) {
				b.WriteString("<li><p>" + genInline(r) + "</p></li>\n")
			}
			b.WriteString("</ol>\n<blockquote><p>" + genSentence(r, 15) + "</p></blockquote>\n")
		}
		b.WriteString("</section>\n")
	}
	b.WriteString(`</article></main>
<aside class="sidebar"><h3>Related</h3><ul>`)
	for range 8 {
		fmt.Fprintf(&b, `<li><a href="https://other.example.net/%s?utm_source=x">%s</a></li>`, genWords[r.IntN(len(genWords))], genSentence(r, 4))
	}
	b.WriteString(`</ul></aside></div>
<footer class="site-footer"><p>&copy; 2024 Example Wiki. Content is available under <a href="/license">CC BY-SA</a>.</p>
<div class="hidden">tracking-footer</div></footer>
<script>document.querySelectorAll("a").forEach(function(a){a.addEventListener("click",function(){gtag("event","click")})});</script>
</body></html>
`)
	return b.String()
}

// genCorpus returns pages totalling at least total bytes.
func genCorpus(seed uint64, total int) []string {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var pages []string
	n := 0
	for n < total {
		p := genPage(r, 20000+r.IntN(120000))
		pages = append(pages, p)
		n += len(p)
	}
	return pages
}
