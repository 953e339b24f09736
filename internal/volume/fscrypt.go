package volume

import (
	"errors"
	"fmt"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel's filesystem encryption (fscrypt), policy v2, through its ioctls.

func keySpec(kid [16]byte) unix.FscryptKeySpecifier {
	spec := unix.FscryptKeySpecifier{Type: unix.FSCRYPT_KEY_SPEC_TYPE_IDENTIFIER}
	copy(spec.U[:], kid[:])
	return spec
}

// addKey gives key to the filesystem mounted at mnt and returns its identifier.
func addKey(mnt string, key []byte) ([16]byte, error) {
	var kid [16]byte
	if len(key) != KeySize {
		return kid, fmt.Errorf("volume key of %d bytes, want %d", len(key), KeySize)
	}
	type addArg struct {
		unix.FscryptAddKeyArg
		raw [KeySize]byte
	}
	arg := addArg{FscryptAddKeyArg: unix.FscryptAddKeyArg{Key_spec: unix.FscryptKeySpecifier{Type: unix.FSCRYPT_KEY_SPEC_TYPE_IDENTIFIER}, Raw_size: KeySize}}
	copy(arg.raw[:], key)
	defer clear(arg.raw[:])
	err := ioctlDir(mnt, unix.FS_IOC_ADD_ENCRYPTION_KEY, unsafe.Pointer(&arg))
	if err != nil {
		return kid, fmt.Errorf("give the volume key to the kernel: %w", err)
	}
	copy(kid[:], arg.Key_spec.U[:16])
	return kid, nil
}

// removeKey takes the key kid out of the filesystem mounted at mnt.
func removeKey(mnt string, kid [16]byte) error {
	arg := unix.FscryptRemoveKeyArg{Key_spec: keySpec(kid)}
	if err := ioctlDir(mnt, unix.FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS, unsafe.Pointer(&arg)); err != nil && !errors.Is(err, unix.ENOKEY) {
		return fmt.Errorf("remove the volume key: %w", err)
	}
	return nil
}

// removeAllKeys takes the key of mnt's data directory out of the kernel.
func removeAllKeys(mnt string) error {
	pol, err := getPolicy(filepath.Join(mnt, dataName))
	if err != nil {
		return err
	}
	return removeKey(mnt, pol.Master_key_identifier)
}

// setPolicy encrypts the empty directory dir under the key kid.
func setPolicy(dir string, kid [16]byte) error {
	pol := unix.FscryptPolicyV2{
		Version:                   unix.FSCRYPT_POLICY_V2,
		Contents_encryption_mode:  unix.FSCRYPT_MODE_AES_256_XTS,
		Filenames_encryption_mode: unix.FSCRYPT_MODE_AES_256_CTS,
		Flags:                     unix.FSCRYPT_POLICY_FLAGS_PAD_32,
		Master_key_identifier:     kid,
	}
	if err := ioctlDir(dir, unix.FS_IOC_SET_ENCRYPTION_POLICY, unsafe.Pointer(&pol)); err != nil {
		return fmt.Errorf("encrypt the volume's data directory: %w", err)
	}
	return nil
}

func getPolicy(dir string) (unix.FscryptPolicyV2, error) {
	arg := unix.FscryptGetPolicyExArg{Size: uint64(unsafe.Sizeof(unix.FscryptPolicyV2{}))}
	var pol unix.FscryptPolicyV2
	if err := ioctlDir(dir, unix.FS_IOC_GET_ENCRYPTION_POLICY_EX, unsafe.Pointer(&arg)); err != nil {
		return pol, fmt.Errorf("read the volume's encryption policy: %w", err)
	}
	pol = *(*unix.FscryptPolicyV2)(unsafe.Pointer(&arg.Policy[0]))
	if pol.Version != unix.FSCRYPT_POLICY_V2 {
		return pol, errors.New("the volume's data directory is not encrypted with a v2 policy")
	}
	return pol, nil
}

func ioctlDir(dir string, req uint, arg unsafe.Pointer) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
	if errno != 0 {
		return errno
	}
	return nil
}
