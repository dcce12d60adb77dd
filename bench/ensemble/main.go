// Command ensemble drives one torchd two ways at a fixed concurrency over the Open Inference
// Protocol's JSON: through an ensemble of two models (one request, the steps chained in the
// server), and by chaining the same two models itself (two requests, the first's output sent
// as the second's input), as a client does without ensembles. It prints requests a second.
//
//	go run ./bench/ensemble -url http://127.0.0.1:18180 -mode ensemble|chain -c 32 -d 10s
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

type tensor struct {
	Name     string    `json:"name"`
	Shape    []int     `json:"shape"`
	Datatype string    `json:"datatype"`
	Data     []float64 `json:"data"`
}

type body struct {
	Inputs  []tensor `json:"inputs,omitempty"`
	Outputs []tensor `json:"outputs,omitempty"`
}

func main() {
	url := flag.String("url", "http://127.0.0.1:18180", "torchd's inference address")
	mode := flag.String("mode", "ensemble", "ensemble: one request to the ensemble; chain: the two models in turn")
	conc := flag.Int("c", 32, "requests in flight")
	dur := flag.Duration("d", 10*time.Second, "how long to run")
	flag.Parse()
	img := make([]float64, 3*64*64)
	for i := range img {
		img[i] = math.Round(math.Sin(float64(i))*1000) / 1000
	}
	input, _ := json.Marshal(body{Inputs: []tensor{{Name: "input", Shape: []int{1, 3, 64, 64}, Datatype: "FP32", Data: img}}})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *conc, MaxConnsPerHost: *conc}}
	post := func(model string, b []byte) (body, error) {
		resp, err := client.Post(*url+"/v2/models/"+model+"/infer", "application/json", bytes.NewReader(b))
		if err != nil {
			return body{}, err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return body{}, fmt.Errorf("%s: %d %s", model, resp.StatusCode, raw)
		}
		var out body
		return out, json.Unmarshal(raw, &out)
	}
	one := func() error {
		if *mode == "ensemble" {
			_, err := post("pipeline", input)
			return err
		}
		emb, err := post("image_encoder", input)
		if err != nil {
			return err
		}
		if len(emb.Outputs) != 1 {
			return fmt.Errorf("image_encoder answered %d outputs", len(emb.Outputs))
		}
		next, _ := json.Marshal(body{Inputs: []tensor{{Name: "embedding", Shape: emb.Outputs[0].Shape, Datatype: "FP32", Data: emb.Outputs[0].Data}}})
		_, err = post("head", next)
		return err
	}
	if err := one(); err != nil { // warm-up, and a check that the set-up answers
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var done, failed atomic.Int64
	stop := time.Now().Add(*dur)
	var wg sync.WaitGroup
	start := time.Now()
	for range *conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if err := one(); err != nil {
					failed.Add(1)
					continue
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		fmt.Fprintf(os.Stderr, "%d requests failed\n", failed.Load())
		os.Exit(1)
	}
	fmt.Printf("%.1f\n", float64(done.Load())/time.Since(start).Seconds())
}
