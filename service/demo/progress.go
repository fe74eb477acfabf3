package demo

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progressBar redraws one line on a terminal while a run goes.
type progressBar struct {
	w     io.Writer
	name  string
	total int

	mu             sync.Mutex
	done, admitted int

	quit     chan struct{}
	finished chan struct{}
}

func startProgress(w io.Writer, name string, total int) *progressBar {
	p := &progressBar{w: w, name: name, total: total, quit: make(chan struct{}), finished: make(chan struct{})}
	go p.loop()
	return p
}

func (p *progressBar) set(done, admitted int) {
	p.mu.Lock()
	p.done, p.admitted = done, admitted
	p.mu.Unlock()
}

func (p *progressBar) loop() {
	defer close(p.finished)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		p.draw()
		select {
		case <-p.quit:
			p.draw()
			fmt.Fprint(p.w, "\n")
			return
		case <-t.C:
		}
	}
}

func (p *progressBar) draw() {
	p.mu.Lock()
	done, admitted := p.done, p.admitted
	p.mu.Unlock()
	const width = 30
	fill := done * width / max(p.total, 1)
	fmt.Fprintf(p.w, "\r  %-6s [%s%s] %d/%d sent, %d admitted ", p.name,
		strings.Repeat("█", fill), strings.Repeat("░", width-fill), done, p.total, admitted)
}

// stop draws the final state, ends the line and waits for the goroutine.
func (p *progressBar) stop() {
	close(p.quit)
	<-p.finished
}
