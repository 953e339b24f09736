package server

import (
	"errors"

	"github.com/airlockhq/airlock/internal/agent"
	"github.com/airlockhq/airlock/internal/errdefs"
)

func asError(err error, target **errdefs.Error) bool { return errors.As(err, target) }

func asRemote(err error, target **agent.RemoteError) bool { return errors.As(err, target) }
