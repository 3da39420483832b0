package billing

import (
	"context"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/apperr"
	"github.com/sluicehq/sluice/models"
	"github.com/sluicehq/sluice/money"
)

// Granularities of a usage series.
const (
	Hour = "hour"
	Day  = "day"
)

// Point is usage in one bucket of a series, for one group.
type Point struct {
	Start            time.Time
	Group            string // the model or token id; "" when not grouped
	Requests         int64
	Rejected         int64
	PromptTokens     int64
	CompletionTokens int64
	CachedTokens     int64
	Cost             money.Amount
}

// maxSeriesHours bounds one series request: a year of hours.
const maxSeriesHours = 366 * 24

// Series is orgID's usage from from to to (to excluded), per hour or per
// day, grouped by model or token (or not). Days are calendar days in the
// organization's time zone, so "today" on a chart is the customer's today;
// the rollups are kept per UTC hour precisely so any zone can be re-bucketed
// (a zone whose offset is not a whole number of hours is bucketed by the
// UTC hour each usage hour starts in). Points come oldest first, grouped
// within each bucket, and only buckets with usage appear.
func (s *Service) Series(ctx context.Context, orgID int64, granularity string, from, to time.Time, groupBy string) ([]Point, error) {
	if granularity != Hour && granularity != Day {
		return nil, apperr.Field(apperr.Invalid, "invalid_granularity", "granularity", "granularity must be hour or day")
	}
	if groupBy != models.GroupNone && groupBy != models.GroupModel && groupBy != models.GroupToken {
		return nil, apperr.Field(apperr.Invalid, "invalid_group_by", "group_by", "group_by must be model or token")
	}
	if !to.After(from) || to.Sub(from) > maxSeriesHours*time.Hour {
		return nil, apperr.Field(apperr.Invalid, "invalid_range", "from", "from must be before to, at most 366 days apart")
	}
	o, err := s.store.Organization(ctx, orgID)
	if err != nil {
		return nil, err
	}
	loc := zone(o.TimeZone)
	rows, err := s.store.UsageHours(ctx, orgID, from.UTC().Truncate(time.Hour), to, groupBy)
	if err != nil {
		return nil, err
	}
	var out []Point
	index := map[string]int{} // bucket start + group -> position in out
	for _, r := range rows {
		start := r.Hour
		if granularity == Day {
			t := r.Hour.In(loc)
			start = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, loc)
		}
		if start.Before(from) && granularity == Hour {
			continue
		}
		k := strconv.FormatInt(start.Unix(), 10) + "\x00" + r.Group
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, Point{Start: start, Group: r.Group})
		}
		p := &out[i]
		p.Requests += r.Requests
		p.Rejected += r.Rejected
		p.PromptTokens += r.PromptTokens
		p.CompletionTokens += r.CompletionTokens
		p.CachedTokens += r.CachedTokens
		p.Cost += r.Cost
	}
	return out, nil
}

// Zone is orgID's time zone (UTC when unset or unknown).
func (s *Service) Zone(ctx context.Context, orgID int64) (*time.Location, error) {
	o, err := s.store.Organization(ctx, orgID)
	if err != nil {
		return nil, err
	}
	return zone(o.TimeZone), nil
}

func zone(name string) *time.Location {
	if loc, err := time.LoadLocation(name); err == nil && name != "" {
		return loc
	}
	return time.UTC
}
